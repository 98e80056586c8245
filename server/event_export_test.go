package server

// EventBody exposes eventBody to the package's external tests (the fuzz target).
var EventBody = eventBody
