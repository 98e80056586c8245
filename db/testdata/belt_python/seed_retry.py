from grnry_belt.exceptions.exception import RetryException

def execute(event_headers, event, profile=None):
    raise RetryException('Try again')
