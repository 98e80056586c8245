// Package worker wires River into Silo: the queues, the workers and the periodic jobs. Each job's
// Work makes one call of an api.* function through the generated queries; the rules live in SQL.
//
// River elects one leader per database, so a periodic job runs once per cluster however many
// `silo work` or `silo up` processes run.
package worker
