// Package server is Silo's HTTP API: one route table, token authentication, JSON errors in Pryv's
// shape, request logging and Prometheus metrics. A handler decodes the request, makes one call of
// the generated queries (package db) and encodes the result; the rules live in SQL.
//
// The files form layers; a file uses only the files below it:
//
//	mqtt.go                        NewWithMQTT: the route table and the MQTT broker (series
//	                               appends over MQTT 3.1.1 and 5)
//	routes.go                      New: the route table
//	profile.go, profile_updater.go, the handlers, one domain each (<domain>*.go)
//	change_ws.go, health.go,
//	account_batch.go               Pryv's batch call (POST /{username}/)
//	account.go, account_ws.go
//	transport.go                   series appends by MQTT and websocket messages, through the
//	                               series routes' joiner
//	router.go                      Silo's own routes and the account routes (/{username}/...)
//	                               on two muxes, and the JSON 404 and 405
//	account_meta.go                Pryv's meta on every answer of the account routes
//	cache.go                       the API cache around Silo's own routes (rules, front cache, ETag)
//	middleware.go                  request logging, metrics and panics (instrument)
//	auth.go                        token → identity (api.token_authenticate), writer and admin checks
//	respond.go                     reading bodies and parameters, JSON answers, fail
//	join.go                        joining concurrent write requests into one call (group commit),
//	                               each with its idempotency key; retry of deadlocked calls
//	server.go, metrics.go,         the server type and its Config, its metrics, the identity cache
//	auth_cache.go, errors.go,      and the SQLSTATE → HTTP table
//	*_errors.go
//
// Change notifications belong to package change: its Hub holds the process's LISTEN connection
// and runs the websocket sessions. GET /ws (change_ws.go) only authenticates the token, checks
// the request, upgrades it and hands the connection and the identity to the hub; the caller
// starts and stops the hub with the process and passes it in Config.Hub.
//
// New returns the http.Handler; the caller owns the http.Server and its graceful shutdown.
// NewWithMQTT also returns the MQTT broker, which the caller serves on a listener it opened (TLS,
// or plain on loopback: cmd/silo decides) and closes at shutdown.
package server
