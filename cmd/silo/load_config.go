package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/silo-db/silo/db"
)

// cmdLoadConfigRun runs silo jobs load-config FILE and silo cache load-config FILE: the file is
// read as YAML, and the SQL checks and stores it (api.job_config_load, api.cache_config_load).
func cmdLoadConfigRun(parent *command, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return &usageError{cmd: parent, msg: parent.name + " needs a command: load-config"}
	}
	switch args[0] {
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, parent.usage())
		return nil
	}
	cmd := parent.sub(args[0])
	if cmd == nil {
		return &usageError{cmd: parent, msg: fmt.Sprintf("unknown command %q", parent.name+" "+args[0])}
	}
	fs, help, err := parse(cmd, args[1:], stdout, true)
	if help || err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &usageError{cmd: cmd, msg: "load-config needs one FILE"}
	}
	data, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("error reading the configuration: %w", err)
	}
	doc, err := db.ConfigJSON(data)
	if err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	return withEnv(cmd, func(ctx context.Context, cfg config, logger *slog.Logger) error {
		return withDatabase(ctx, cfg, logger, false, func(pool *pgxpool.Pool, _ string) error {
			q := db.New(pool)
			var version int32
			if cmd == cmdJobsLoadConfig {
				version, err = q.JobConfigLoad(ctx, doc)
			} else {
				version, err = q.CacheConfigLoad(ctx, doc)
			}
			if err != nil {
				return describe(err)
			}
			fmt.Fprintf(stdout, "%s: configuration version %d loaded\n", fs.Arg(0), version)
			return nil
		})
	})
}
