// Package worker runs Silo's background work: the River client with its queue, workers and
// periodic jobs, and the asynchronous profile updater. Each job's Work, and each updater step,
// makes one call of an api.* function through the generated queries of package db; the rules
// (what is due, what is trimmed, in which order updates apply, when to retry or throttle) live in
// SQL, in sql/ (sql/profile/, sql/change/, sql/purge/, ...).
//
// The package must not hold queries of its own (the updater's LISTEN aside) nor decide what the SQL
// decides, must not serve HTTP, and must not rename a job's Kind or a periodic job's ID: River
// persists them in river_job, and a renamed kind strands the jobs queued under the old one.
//
// River elects one leader per database, so a periodic job runs once per cluster however many
// `silo work` or `silo up` processes run.
//
// Files, by domain (auth and settings have no background work):
//   - worker.go: the River client (Config, NewClient, the queue names).
//   - profile_reaper.go: the reaper job (TTL deletions, TTN notifications, reaper event trim).
//   - profile_dead_letter.go: the trim of resolved dead letters.
//   - profile_updater.go: the asynchronous profile updater (goroutines, not a River job) and the
//     inbox backlog collector.
//   - retention.go: the retention job (the event store, the change log, idempotency keys and every
//     other target of purge.retention_targets).
//   - purge.go: the recurring purge of the operational data store (STANDARD and TTL modes).
//   - partition_maintenance.go: the maintenance of time-partitioned tables.
//
// A River worker queries through the db.Queries it is built with. NewClient builds them on the
// pool, so each call is its own transaction; the tests build them on the test's transaction, the
// one in which rivertest inserts and works the job, so a worker's effect is seen and rolled back
// with the test.
package worker
