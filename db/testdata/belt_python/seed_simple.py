from time import time

def execute(event_headers, event_payload, profile=None):
    print(profile)
    # Create Profile Update object with correlationId (String) and path (Array<String>)
    update = Update(profile['correlationId'],["dummy"])
    # Set value of Profile Update
    update.set_value("Hello Belt!",0.5,time(),'P1D','Dummy-Belt')
    # Set type of Profile Update
    update.set_type('TestProfileType')
    # Set operation of Profile Update
    update.set_operation('_set')
    return [update]
