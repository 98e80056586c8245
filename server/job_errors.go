package server

import "net/http"

// SQLSTATEs of the job service (sql/job/). The generic codes it raises as well: SLINV (invalid
// arguments, 400), SLNFD (no such job or pool, 404).
func init() {
	// A configuration that breaks a rule (silo jobs load-config, api.job_config_load); the message
	// names the offending key.
	registerError("SJCFG", http.StatusBadRequest, "invalid-job-configuration")
	// Events sent before any configuration was loaded.
	registerError("SJNCF", http.StatusConflict, "job-service-not-configured")
	// An event that is not one (no resource_type or action_type, a bad timestamp): refused alone.
	registerError("SJEVT", http.StatusUnprocessableEntity, "invalid-job-event")
}
