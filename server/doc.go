// Package server is Silo's HTTP API: one route table, token authentication, JSON errors in Pryv's
// shape, request logging and Prometheus metrics. A handler decodes the request, makes one call of
// the generated queries (package db) and encodes the result; the rules live in SQL.
//
// Change notifications: the Hub (hub.go) holds the process's LISTEN connection and fans the change
// log out to websocket clients of GET /ws (ws.go); the caller starts and stops it with the process.
//
// New returns the http.Handler; the caller owns the http.Server and its graceful shutdown.
package server
