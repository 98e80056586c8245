package server

import "net/http"

// SQLSTATEs of time partitioning (migration 00015, sql/partition/).
func init() {
	registerError("STNTP", http.StatusNotFound, "not-time-partitioned")                     // the table is not one of partition.tables
	registerError("STBKD", http.StatusInternalServerError, "partition-backend-unavailable") // timescaledb in the database but not preloaded; neither TimescaleDB nor pg_partman
}
