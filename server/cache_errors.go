package server

import "net/http"

// SQLSTATEs of the API cache (sql/cache/).
func init() {
	// A cache configuration that breaks a rule (silo cache load-config, api.cache_config_load);
	// the message names the offending key.
	registerError("SCCFG", http.StatusBadRequest, "invalid-cache-configuration")
}
