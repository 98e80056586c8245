package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// command is one command of the CLI: what `silo help` lists and `silo COMMAND --help` prints.
type command struct {
	name     string   // as typed: "migrate", "token create"
	summary  string   // one line for the list of commands
	synopsis string   // after "Usage: "
	about    string   // what it does, a paragraph or two
	env      []string // the environment variables it reads, in envDocs
	flags    func(fs *flag.FlagSet)
	subs     []*command
}

// envDocs describes every environment variable Silo reads.
var envDocs = map[string]string{
	"DATABASE_URL": "PostgreSQL to use (postgres://user:password@host:port/db?sslmode=...);\n" +
		"unset: the embedded cluster in $SILO_DATA_DIR/pg, started or joined",
	"SILO_DATA_DIR":              "directory of the embedded cluster (default ./.silo)",
	"SILO_PG_BIN":                "PostgreSQL server binaries for the embedded cluster\n(default: the newest /usr/lib/postgresql/*/bin, else pg_config --bindir)",
	"SILO_LOG_LEVEL":             "debug, info, warn or error (default info)",
	"SILO_ADDR":                  "HTTP listen address, host:port (default :8080)",
	"SILO_DEAD_LETTER_RETENTION": "how long resolved dead letters are kept (default 720h; 0 keeps them)",
	"SILO_REAPER_INTERVAL": "how often the reaper deletes expired (ttl) and notifies due (ttn) grains\n" +
		"(default 1m; 0 disables it); batch size and event retention are the\n" +
		"silo.settings rows reaper.batch_size and reaper.event_retention",
	"SILO_REAPER_BUDGET": "how long one reaper run may go on while grains are due (default 1m)",
	"SILO_JOB_RESCUE_AFTER": "how long a periodic job (the purge, the reaper, a trim) of a process\n" +
		"that died may look running before it is ended and its kind scheduled\n" +
		"again (default 5m, or twice SILO_REAPER_BUDGET when longer; under 2m, jobs\n" +
		"time out after half of it)",
	"SILO_UPDATER_WORKERS": "asynchronous profile updater workers per priority stream in this process\n" +
		"(default 2; 0: this process applies no queued updates)",
	"SILO_BELT_WORKERS": "belt workers in this process, each running processing steps of any running\n" +
		"belt (default 2; 0: this process runs no belt)",
	"SILO_DB_MAX_CONNS": "size of the process's database connection pool, 2 or more (default:\n" +
		"pool_max_conns of DATABASE_URL, else 4 or the number of CPUs, whichever is larger;\n" +
		"this setting wins over pool_max_conns). Held beside the pool: the change listener\n" +
		"(up, serve); River's listener, the updater's own pool of 2 x SILO_UPDATER_WORKERS + 1\n" +
		"and its listener, the belts' own pool of SILO_BELT_WORKERS + 1 and their\n" +
		"listener (up, work)",
	"SILO_JOBS": "on or off (default on): this process runs the job manager's pools (the\n" +
		"configuration's job_consumers, loaded with silo jobs load-config)",
	"SILO_METRICS_ADDR":   "where silo work serves /metrics (default unset: not served; silo up\nand silo serve serve it on SILO_ADDR)",
	"SILO_TEMPDB_DURABLE": "set: the throw-away cluster keeps fsync and synchronous commit on (benchmarks)",
	"SILO_MQTT_ADDR": "MQTT broker listen address, host:port (default :8883; off: no broker):\n" +
		"series appends over MQTT 3.1.1 and 5, TLS unless SILO_MQTT_PLAIN",
	"SILO_MQTT_CERT": "the MQTT broker's TLS certificate, a PEM file (with SILO_MQTT_KEY; both unset:\n" +
		"a self-signed pair made once in $SILO_DATA_DIR/mqtt-cert.pem and mqtt-key.pem,\n" +
		"its SHA-256 fingerprint logged at start)",
	"SILO_MQTT_KEY":   "the MQTT broker's TLS private key, a PEM file (with SILO_MQTT_CERT)",
	"SILO_MQTT_PLAIN": "1: the MQTT broker takes plain TCP, no TLS; allowed only when SILO_MQTT_ADDR\nis a loopback address (127.0.0.1, [::1], localhost)",
}

var (
	dbEnv  = []string{"DATABASE_URL", "SILO_DATA_DIR", "SILO_PG_BIN", "SILO_LOG_LEVEL", "SILO_DB_MAX_CONNS"}
	allEnv = []string{"DATABASE_URL", "SILO_ADDR", "SILO_DATA_DIR", "SILO_PG_BIN", "SILO_LOG_LEVEL", "SILO_DB_MAX_CONNS",
		"SILO_DEAD_LETTER_RETENTION", "SILO_REAPER_INTERVAL", "SILO_REAPER_BUDGET", "SILO_JOB_RESCUE_AFTER", "SILO_UPDATER_WORKERS", "SILO_BELT_WORKERS",
		"SILO_JOBS", "SILO_METRICS_ADDR", "SILO_TEMPDB_DURABLE", "SILO_MQTT_ADDR", "SILO_MQTT_CERT", "SILO_MQTT_KEY", "SILO_MQTT_PLAIN"}
	mqttEnv = []string{"SILO_MQTT_ADDR", "SILO_MQTT_CERT", "SILO_MQTT_KEY", "SILO_MQTT_PLAIN"}
)

const embeddedNote = `With DATABASE_URL unset, the embedded cluster in $SILO_DATA_DIR/pg is started (initdb on
first use) or joined when another Silo process runs it. Every process using it holds a lease;
the last one to stop stops the server, and the server keeps its port across restarts. It
preloads TimescaleDB when the server has it installed: a database migrated then makes its
time-partitioned tables hypertables.`

var (
	cmdUp = &command{
		name: "up", summary: "embedded database if needed, migrate, HTTP API and workers",
		synopsis: "silo up",
		about: `Runs all of Silo in one process: migrates the database (as silo migrate), then serves the
HTTP API and websocket changes on SILO_ADDR (with /metrics, /healthz, /readyz), series
appends over MQTT on SILO_MQTT_ADDR, and runs the River workers, the profile updater and the belt
workers, until SIGINT or SIGTERM. SILO_ADDR and SILO_MQTT_ADDR are taken before anything starts:
an address in use or malformed fails at once.

` + embeddedNote,
		env: append([]string{"DATABASE_URL", "SILO_ADDR", "SILO_DATA_DIR", "SILO_PG_BIN", "SILO_LOG_LEVEL", "SILO_DB_MAX_CONNS",
			"SILO_UPDATER_WORKERS", "SILO_BELT_WORKERS", "SILO_JOBS", "SILO_REAPER_INTERVAL", "SILO_REAPER_BUDGET", "SILO_JOB_RESCUE_AFTER", "SILO_DEAD_LETTER_RETENTION"}, mqttEnv...),
	}
	cmdMigrate = &command{
		name: "migrate", summary: "apply migrations and rebuild schema api",
		synopsis: "silo migrate",
		about: `Applies the goose migrations and River's, then rebuilds schema api from sql/ when its
files changed. Idempotent, and safe to run from several processes at once.

` + embeddedNote,
		env: dbEnv,
	}
	cmdServe = &command{
		name: "serve", summary: "HTTP API only",
		synopsis: "silo serve",
		about: `Serves the HTTP API and websocket changes on SILO_ADDR (with /metrics, /healthz, /readyz)
and series appends over MQTT on SILO_MQTT_ADDR until SIGINT or SIGTERM; runs no workers and
does not migrate. Any number may run against one database.

` + embeddedNote,
		env: append([]string{"DATABASE_URL", "SILO_ADDR", "SILO_DATA_DIR", "SILO_PG_BIN", "SILO_LOG_LEVEL", "SILO_DB_MAX_CONNS"}, mqttEnv...),
	}
	cmdWork = &command{
		name: "work", summary: "workers only (River, profile updater, belts)",
		synopsis: "silo work",
		about: `Runs the River workers (periodic jobs such as the reaper), the profile updater and the
belt workers until SIGINT or SIGTERM; serves no HTTP API (/metrics on SILO_METRICS_ADDR when set). Any number may
run against one database.

` + embeddedNote,
		env: []string{"DATABASE_URL", "SILO_DATA_DIR", "SILO_PG_BIN", "SILO_LOG_LEVEL", "SILO_DB_MAX_CONNS",
			"SILO_UPDATER_WORKERS", "SILO_BELT_WORKERS", "SILO_JOBS", "SILO_REAPER_INTERVAL", "SILO_REAPER_BUDGET", "SILO_JOB_RESCUE_AFTER", "SILO_DEAD_LETTER_RETENTION",
			"SILO_METRICS_ADDR"},
	}
	cmdTokenCreate = &command{
		name: "token create", summary: "create an access token and print it",
		synopsis: "silo token create --name NAME [--roles ROLE,...] [--write] [--admin]",
		about:    "Creates an access token and prints it (only its hash is stored: it cannot be shown again).",
		env:      dbEnv,
		flags: func(fs *flag.FlagSet) {
			fs.String("name", "", "token `name`, unique (required)")
			fs.String("roles", "", "comma-separated reader `roles`")
			fs.Bool("write", false, "may apply profile updates")
			fs.Bool("admin", false, "may administer (dead letters, configuration); implies --write")
		},
	}
	cmdTokenRevoke = &command{
		name: "token revoke", summary: "revoke an access token",
		synopsis: "silo token revoke --name NAME",
		about:    "Revokes the access token of that name: requests carrying it are refused from now on.",
		env:      dbEnv,
		flags: func(fs *flag.FlagSet) {
			fs.String("name", "", "token `name` (required)")
		},
	}
	cmdToken = &command{
		name: "token", summary: "create or revoke access tokens",
		synopsis: "silo token create|revoke [FLAGS]",
		about:    "Manages access tokens.",
		env:      dbEnv,
		subs:     []*command{cmdTokenCreate, cmdTokenRevoke},
	}
	cmdUserCreate = &command{
		name: "user create", summary: "create a user (Pryv account) and print its personal token",
		synopsis: "silo user create [--access-name NAME] USERNAME",
		about: `Creates a user, whose API endpoint is http://{token}@{host}/{username}/ (Pryv's routes:
accesses, streams, events), with a personal access (every right on the user's data), and prints
the personal access token (only its hash is stored: it cannot be shown again). A username is 5
to 60 lowercase letters, digits and dashes, starting and ending with a letter or digit, and not
the first segment of one of Silo's own routes (profiles, events, ws, ...).`,
		env: dbEnv,
		flags: func(fs *flag.FlagSet) {
			fs.String("access-name", "silo", "`name` of the personal access")
		},
	}
	cmdUser = &command{
		name: "user", summary: "create users (Pryv accounts)",
		synopsis: "silo user create [FLAGS] USERNAME",
		about:    "Manages users: Pryv accounts with streams, accesses and events under /{username}/.",
		env:      dbEnv,
		subs:     []*command{cmdUserCreate},
	}
	cmdJobsLoadConfig = &command{
		name: "jobs load-config", summary: "check and load the job service's configuration",
		synopsis: "silo jobs load-config FILE",
		about: `Reads FILE (YAML, the job service's configuration: job_scheduler.job_rules, the enricher's
topics, common and defaults, deduper, job_publisher, feed_manager, cache_manager and its rules,
job_consumers), checks it and stores it in the job.config tables, replacing the previous one.
An error names the offending key. Running Silo processes take the new pools at once.`,
		env: dbEnv,
	}
	cmdJobs = &command{
		name: "jobs", summary: "configure the job service",
		synopsis: "silo jobs load-config FILE",
		about:    "Manages the job service's configuration.",
		env:      dbEnv,
		subs:     []*command{cmdJobsLoadConfig},
	}
	cmdCacheLoadConfig = &command{
		name: "cache load-config", summary: "check and load the API cache's rules",
		synopsis: "silo cache load-config FILE",
		about: `Reads FILE (JSON or YAML: {"<METHOD>/path/": {"defaults": {...}, "overrides": {"rules": [...]}}}),
checks it and stores it in cache.endpoints and cache.rules, replacing the previous rules and
emptying the cache. An error names the offending key. Running Silo processes take it within a
second.`,
		env: dbEnv,
	}
	cmdCache = &command{
		name: "cache", summary: "configure the API cache",
		synopsis: "silo cache load-config FILE",
		about:    "Manages the API cache's rules.",
		env:      dbEnv,
		subs:     []*command{cmdCacheLoadConfig},
	}
	cmdPsql = &command{
		name: "psql", summary: "psql on the configured or embedded database",
		synopsis: "silo psql [--] [PSQL ARGS...]",
		about: `Runs psql on DATABASE_URL, or on the embedded cluster (started or joined for the time psql
runs). Arguments go to psql, e.g. silo psql -c 'select 1'; -h and --help before a -- print
this help, arguments after -- go to psql untouched (silo psql -- --help shows psql's own).`,
		env: dbEnv,
	}
	cmdTempDB = &command{
		name: "tempdb", summary: "run a command against a throw-away cluster (how the tests run)",
		synopsis: "silo tempdb [--] CMD [ARGS...]",
		about: `Starts a throw-away PostgreSQL cluster, creates a migrated template database, runs CMD with
SILO_TEST_DATABASE_URL and SILO_TEST_TEMPLATE set for it, then stops the cluster and removes
it. Exits with CMD's status; SIGINT and SIGTERM are passed on to CMD.`,
		env: []string{"SILO_PG_BIN", "SILO_LOG_LEVEL", "SILO_TEMPDB_DURABLE"},
	}
	cmdVersion = &command{
		name: "version", summary: "print the version",
		synopsis: "silo version",
		about: `Prints the version: the module version of a build from a tagged module, else the commit it
was built from, its time, and "dirty" when the work tree had changes. silo --version too.`,
	}
	cmdHelp = &command{
		name: "help", summary: "list the commands, or print a command's usage",
		synopsis: "silo help [COMMAND [SUBCOMMAND]]",
		about:    "Lists the commands, or prints the usage of one (as silo COMMAND --help does).",
	}
	cmdWS = &command{
		name: "ws", summary: "a websocket client for scripts: stdin lines out, messages in",
		synopsis: "silo ws [-H 'Name: value']... [--wait DURATION] URL",
		about: `Connects to a websocket (ws:// or wss://, e.g. GET /{username}/ws), sends each line of stdin
as one text message and prints every message received, one per line. Ends when stdin has ended
and every message sent with an "id" member has its answer (a message with the same "id"), or
fails when --wait passes first or the connection ends.`,
		flags: func(fs *flag.FlagSet) {
			fs.Var(&headerFlags{}, "H", "a request `header`, 'Name: value' (repeatable), e.g. -H \"Authorization: $TOKEN\"")
			fs.Duration("wait", 30*time.Second, "how long answers are awaited once stdin has ended")
		},
	}
	commands = []*command{cmdUp, cmdMigrate, cmdServe, cmdWork, cmdToken, cmdUser, cmdJobs, cmdCache, cmdPsql, cmdTempDB, cmdWS, cmdVersion, cmdHelp}
)

func findCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// flagSet makes the command's flag set; parse errors and help are reported by the caller.
func (c *command) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("silo "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if c.flags != nil {
		c.flags(fs)
	}
	return fs
}

// usage is the command's help text.
func (c *command) usage() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s\n\n%s\n", c.synopsis, c.about)
	if len(c.subs) > 0 {
		b.WriteString("\nCommands:\n")
		for _, s := range c.subs {
			fmt.Fprintf(&b, "  %s\n      %s\n", s.synopsis, s.summary)
		}
		fmt.Fprintf(&b, "\nsilo %s COMMAND --help prints the usage of one.\n", c.name)
	}
	b.WriteString("\nFlags:\n")
	fs := c.flagSet()
	fs.VisitAll(func(f *flag.Flag) {
		name, text := flag.UnquoteUsage(f)
		left := "--" + f.Name
		if len(f.Name) == 1 {
			left = "-" + f.Name // a one-letter flag, as curl's -H
		}
		if name != "" {
			left += " " + strings.ToUpper(name)
		}
		fmt.Fprintf(&b, "  %-28s %s\n", left, text)
	})
	fmt.Fprintf(&b, "  %-28s %s\n", "-h, --help", "print this help")
	if len(c.env) > 0 {
		b.WriteString("\nEnvironment:\n")
		writeEnv(&b, c.env)
	}
	return b.String()
}

func writeEnv(b *strings.Builder, names []string) {
	for _, name := range names {
		lines := strings.Split(envDocs[name], "\n")
		fmt.Fprintf(b, "  %-28s %s\n", name, lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(b, "  %-28s %s\n", "", l)
		}
	}
}

// mainUsage is what silo help, silo --help and silo -h print.
func mainUsage() string {
	var b strings.Builder
	b.WriteString(`silo — a PostgreSQL-first engine for entity data

Usage: silo COMMAND [FLAGS] [ARGS...]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.summary)
		for _, s := range c.subs {
			fmt.Fprintf(&b, "  %-10s %s\n", "", s.synopsis)
		}
	}
	b.WriteString(`
Flags:
  -h, --help   print this help
  --version    print the version

silo COMMAND --help prints a command's usage: its flags and the environment it reads.
Configuration comes from the environment:

`)
	writeEnv(&b, allEnv)
	return b.String()
}
