// Package server is Silo's HTTP API: one route table, token authentication, JSON errors in Pryv's
// shape, request logging and Prometheus metrics. A handler decodes the request, makes one call of
// the generated queries (package db) and encodes the result; the rules live in SQL.
//
// New returns the http.Handler; the caller owns the http.Server and its graceful shutdown.
package server
