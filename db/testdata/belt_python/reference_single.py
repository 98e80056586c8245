import json

def execute(event_headers, event, profile=None):

    correlation_id = event_headers['grnry-correlation-id']
    event_data = lookup(event, ['body'])

    if event_data is None:
        return None

    updates = []

    if lookup(event_data, ['integration_test_data']):

        for simple_pair in lookup(event_data, ['simple_pairs']):
            value = simple_pair['value']
            path = makepath(simple_pair['path'])
            reader = simple_pair['reader'] if simple_pair['reader'] else '_all'
            updates.append(Update(correlation_id, path))
            updates[-1].set_value(value=value, reader=reader)
            if lookup(simple_pair, ['operation']):
                operation = simple_pair['operation']                
                updates[-1].set_operation(operation)
            if lookup(simple_pair, ['type']):
                type = simple_pair['type']
                updates[-1].set_type(type)
    return updates


def lookup(dictionary, keys):
    if type(dictionary) == type(''):
        dictionary = json.loads(dictionary)
    try:
        if len(keys) > 1:
            value = lookup(dictionary[keys[0]], keys[1:])
        else:
            value = dictionary[keys[0]]
        return value
    except:
        return None


def makepath(stringpath):
    path = stringpath.split('/')
    return path
