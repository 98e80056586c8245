import json
import sys
from time import time
import logging
import random

def lookup(dictionary,keys):
   if type(dictionary)==type(''):
            dictionary=json.loads(dictionary)
                try:
                    if len(keys)>1:
                       value = lookup(dictionary[keys[0]],keys[1:])
                    else:
                       value = dictionary[keys[0]]
                       return value    
                 except:        
                    return None

def makepath(stringpath):    
   path=stringpath.split('/')
   return path

def create_update(correlation_id, path, value):
   update=Update(correlation_id, path, operation='_array_append');
   update.set_value(value=value, origin='integration-test', reader='_all')
   update.set_type('toe-436-test')
   return update

def execute(event_headers, event_payload, profile=None):
    if not event_headers:
      return None
    zipped_events = zip(event_headers, event_payload)    
    updates = [create_update(event[0]['grnry-correlation-id'], makepath(json.loads(json.loads(event[1])['body'])['simple_pairs'][0]['path']), json.loads(json.loads(event[1])['body'])['simple_pairs'][0]['value']) for event in zipped_events]
    logging.debug(updates)
    logging.debug(updates[0]())
    return updates
