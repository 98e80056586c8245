// Command silo runs Silo: `silo up` starts everything in one process (an embedded PostgreSQL when
// DATABASE_URL is unset, migrations, the HTTP API and the River workers); the other commands run
// one part each. Configuration comes from the environment (silo help lists it).
//
// Exit status: 0 done (and for --help), 1 failed (one line on stderr naming what to change),
// 2 bad command line (the usage on stderr); psql and tempdb exit with their command's status.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
	"github.com/silo-db/silo/db/embedpg"
	"github.com/silo-db/silo/server"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// usageError is a bad command line: the message and the usage of cmd (nil: of silo) go to stderr,
// and silo exits 2.
type usageError struct {
	cmd *command
	msg string
}

func (e *usageError) Error() string { return e.msg }

// childExit is the exit status of the command silo ran (psql, tempdb's CMD), passed on as silo's.
type childExit struct{ code int }

func (e childExit) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// run runs the command line and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	err := dispatch(args, stdout)
	if err == nil {
		return 0
	}
	var ue *usageError
	if errors.As(err, &ue) {
		text := mainUsage()
		if ue.cmd != nil {
			text = ue.cmd.usage()
		}
		name := "silo"
		if ue.cmd != nil {
			name += " " + ue.cmd.name
		}
		fmt.Fprintf(stderr, "%s: %s\n\n%s", name, ue.msg, text)
		return 2
	}
	var ce childExit
	if errors.As(err, &ce) {
		return ce.code
	}
	fmt.Fprintln(stderr, "silo: "+oneLine(err.Error()))
	return 1
}

// oneLine joins the lines of a message (pgx puts each connection attempt on its own) into one,
// without repeats.
func oneLine(msg string) string {
	var parts []string
	seen := map[string]bool{}
	for _, l := range strings.Split(msg, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !seen[l] {
			seen[l] = true
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " ")
}

func dispatch(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stdout, mainUsage())
		return nil
	}
	switch args[0] {
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, mainUsage())
		return nil
	case "-version", "--version":
		fmt.Fprintln(stdout, version())
		return nil
	}
	if strings.HasPrefix(args[0], "-") {
		return &usageError{msg: fmt.Sprintf("unknown flag %s", args[0])}
	}
	cmd := findCommand(args[0])
	if cmd == nil {
		return &usageError{msg: fmt.Sprintf("unknown command %q", args[0])}
	}
	rest := args[1:]
	switch cmd {
	case cmdHelp:
		return cmdHelpRun(rest, stdout)
	case cmdVersion:
		if _, help, err := parse(cmd, rest, stdout, false); help || err != nil {
			return err
		}
		fmt.Fprintln(stdout, version())
		return nil
	case cmdUp, cmdServe, cmdWork, cmdMigrate:
		if _, help, err := parse(cmd, rest, stdout, false); help || err != nil {
			return err
		}
		return withEnv(cmd, func(ctx context.Context, cfg config, logger *slog.Logger) error {
			switch cmd {
			case cmdUp:
				return cmdRun(ctx, cfg, logger, true, true)
			case cmdServe:
				return cmdRun(ctx, cfg, logger, true, false)
			case cmdWork:
				return cmdRun(ctx, cfg, logger, false, true)
			}
			return withDatabase(ctx, cfg, logger, false, func(pool *pgxpool.Pool, _ string) error {
				return db.Migrate(ctx, pool, logger)
			})
		})
	case cmdToken:
		return cmdTokenRun(rest, stdout)
	case cmdUser:
		return cmdUserRun(rest, stdout)
	case cmdJobs, cmdCache:
		return cmdLoadConfigRun(cmd, rest, stdout)
	case cmdPsql:
		psqlArgs, help := psqlArgs(rest)
		if help {
			fmt.Fprint(stdout, cmd.usage())
			return nil
		}
		return withEnv(cmd, func(ctx context.Context, cfg config, logger *slog.Logger) error {
			return cmdPsqlRun(ctx, cfg, logger, psqlArgs)
		})
	case cmdWS:
		return cmdWSRun(rest, stdout)
	case cmdTempDB:
		fs, help, err := parse(cmd, rest, stdout, true)
		if help || err != nil {
			return err
		}
		if fs.NArg() == 0 {
			return &usageError{cmd: cmd, msg: "tempdb needs a command to run"}
		}
		return withEnv(cmd, func(ctx context.Context, _ config, logger *slog.Logger) error {
			return cmdTempDBRun(ctx, logger, fs.Args())
		})
	}
	return &usageError{msg: fmt.Sprintf("unknown command %q", args[0])}
}

// parse parses a command's flags. help reports that -h or --help was given: the usage is then
// printed to stdout and nothing else is done. Positional arguments are an error unless allowed.
func parse(cmd *command, args []string, stdout io.Writer, positional bool) (fs *flag.FlagSet, help bool, err error) {
	fs = cmd.flagSet()
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, cmd.usage())
			return fs, true, nil
		}
		return fs, false, &usageError{cmd: cmd, msg: err.Error()}
	}
	if !positional && fs.NArg() > 0 {
		return fs, false, &usageError{cmd: cmd, msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	return fs, false, nil
}

// withEnv reads the configuration of command cmd (its connections are named after it), sets the
// logger up and runs fn until SIGINT, SIGTERM or SIGHUP cancels its context.
func withEnv(cmd *command, fn func(ctx context.Context, cfg config, logger *slog.Logger) error) error {
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	cfg.appName = "silo " + cmd.name
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	return fn(ctx, cfg, logger)
}

func cmdHelpRun(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stdout, mainUsage())
		return nil
	}
	if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		fmt.Fprint(stdout, cmdHelp.usage())
		return nil
	}
	cmd := findCommand(args[0])
	if cmd == nil {
		return &usageError{cmd: cmdHelp, msg: fmt.Sprintf("unknown command %q", args[0])}
	}
	if len(args) > 1 && len(cmd.subs) > 0 {
		sub := cmd.sub(args[1])
		if sub == nil {
			return &usageError{cmd: cmd, msg: fmt.Sprintf("unknown command %q", cmd.name+" "+args[1])}
		}
		cmd, args = sub, args[1:]
	}
	if len(args) > 1 {
		return &usageError{cmd: cmdHelp, msg: fmt.Sprintf("unexpected argument %q", args[1])}
	}
	fmt.Fprint(stdout, cmd.usage())
	return nil
}

func (c *command) sub(name string) *command {
	for _, s := range c.subs {
		if s.name == c.name+" "+name {
			return s
		}
	}
	return nil
}

// withDatabase resolves the database (DATABASE_URL, or the embedded cluster started or joined for
// the time of fn), opens a pool and calls fn with it and the URL. A server process (up, serve,
// work) logs the embedded cluster's start and stop at info; a one-shot command only at debug, so
// its output stays its own.
func withDatabase(ctx context.Context, cfg config, logger *slog.Logger, server bool, fn func(pool *pgxpool.Pool, url string) error) error {
	url := cfg.databaseURL
	if url == "" {
		level := slog.LevelDebug
		if server {
			level = slog.LevelInfo
		}
		cluster, err := embedpg.Start(ctx, embedpg.Options{
			Dir: embeddedDir(cfg),
			Log: func(format string, args ...any) {
				logger.Log(context.Background(), level, fmt.Sprintf(format, args...))
			},
		})
		if err != nil {
			return fmt.Errorf("error starting the embedded PostgreSQL in %s: %w", embeddedDir(cfg), err)
		}
		defer func() {
			if err := cluster.Stop(); err != nil {
				logger.Error("error stopping the embedded PostgreSQL", "err", err)
			}
		}()
		url = cluster.URL("postgres")
	}
	pool, err := openDatabase(ctx, cfg, url, cfg.databaseURL != "")
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(pool, url)
}

func cmdTokenRun(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return &usageError{cmd: cmdToken, msg: "token needs a command: create or revoke"}
	}
	switch args[0] {
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, cmdToken.usage())
		return nil
	}
	cmd := cmdToken.sub(args[0])
	if cmd == nil {
		return &usageError{cmd: cmdToken, msg: fmt.Sprintf("unknown command %q", "token "+args[0])}
	}
	fs, help, err := parse(cmd, args[1:], stdout, false)
	if help || err != nil {
		return err
	}
	name := fs.Lookup("name").Value.String()
	if name == "" {
		return &usageError{cmd: cmd, msg: "--name is required"}
	}
	return withEnv(cmd, func(ctx context.Context, cfg config, logger *slog.Logger) error {
		return withDatabase(ctx, cfg, logger, false, func(pool *pgxpool.Pool, _ string) error {
			q := db.New(pool)
			if cmd == cmdTokenRevoke {
				_, err := q.TokenRevoke(ctx, name)
				return describe(err)
			}
			var roleList []string
			for _, r := range strings.Split(fs.Lookup("roles").Value.String(), ",") {
				if r = strings.TrimSpace(r); r != "" {
					roleList = append(roleList, r)
				}
			}
			row, err := q.TokenCreate(ctx, db.TokenCreateParams{
				Name: name, Roles: roleList,
				CanWrite: fs.Lookup("write").Value.String() == "true",
				IsAdmin:  fs.Lookup("admin").Value.String() == "true",
			})
			if err != nil {
				return describe(err)
			}
			fmt.Fprintln(stdout, row.Token)
			return nil
		})
	})
}

func cmdUserRun(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return &usageError{cmd: cmdUser, msg: "user needs a command: create"}
	}
	switch args[0] {
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, cmdUser.usage())
		return nil
	}
	cmd := cmdUser.sub(args[0])
	if cmd == nil {
		return &usageError{cmd: cmdUser, msg: fmt.Sprintf("unknown command %q", "user "+args[0])}
	}
	fs, help, err := parse(cmd, args[1:], stdout, true)
	if help || err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &usageError{cmd: cmd, msg: "user create needs one USERNAME"}
	}
	username := fs.Arg(0)
	return withEnv(cmd, func(ctx context.Context, cfg config, logger *slog.Logger) error {
		return withDatabase(ctx, cfg, logger, false, func(pool *pgxpool.Pool, _ string) error {
			row, err := db.New(pool).AccountUserCreate(ctx, db.AccountUserCreateParams{
				Username: username, AccessName: fs.Lookup("access-name").Value.String()})
			if err != nil {
				return describe(err)
			}
			fmt.Fprintln(stdout, row.Token)
			return nil
		})
	})
}

// describe turns a registered SQL error into its message for the terminal.
func describe(err error) error {
	if apiErr, ok := server.ErrorFor(err); ok {
		return errors.New(apiErr.Message)
	}
	return err
}

// psqlArgs picks psql's arguments out of silo psql's: help is asked for by -h, -help or --help
// before a --; the first -- is dropped, and what follows it goes to psql as it is.
func psqlArgs(args []string) (out []string, help bool) {
	for i, a := range args {
		switch a {
		case "--":
			return append(out, args[i+1:]...), false
		case "-h", "-help", "--help":
			return nil, true
		}
		out = append(out, a)
	}
	return out, false
}

func cmdPsqlRun(ctx context.Context, cfg config, logger *slog.Logger, args []string) error {
	return withDatabase(ctx, cfg, logger, false, func(pool *pgxpool.Pool, url string) error {
		pool.Close()
		psql, err := exec.LookPath("psql")
		if err != nil {
			return errors.New("psql not found: install the PostgreSQL client (Debian: apt-get install postgresql-client)")
		}
		cmd := exec.Command(psql, append([]string{url}, args...)...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		signal.Ignore(os.Interrupt) // Ctrl-C belongs to psql while it runs
		defer signal.Reset(os.Interrupt)
		return exitStatus(cmd.Run())
	})
}

// exitStatus turns the exit of a command silo ran into silo's own status (128+n for signal n).
func exitStatus(err error) error {
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		return err
	}
	if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return childExit{code: 128 + int(ws.Signal())}
	}
	return childExit{code: exitErr.ExitCode()}
}

// cmdTempDBRun starts a throw-away cluster, migrates a template database once, runs the command
// with SILO_TEST_DATABASE_URL and SILO_TEST_TEMPLATE set, then stops the cluster and removes it.
func cmdTempDBRun(ctx context.Context, logger *slog.Logger, args []string) error {
	dir, err := os.MkdirTemp("", "silo-tempdb-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	_ = os.Chmod(dir, 0o755)
	settings := dbtest.TestSettings
	if os.Getenv("SILO_TEMPDB_DURABLE") != "" {
		settings = map[string]string{"max_connections": "300", "shared_buffers": "256MB",
			"timescaledb.max_background_workers": dbtest.TestSettings["timescaledb.max_background_workers"]}
	}
	cluster, err := embedpg.Start(ctx, embedpg.Options{Dir: dir, Settings: settings})
	if err != nil {
		return err
	}
	defer cluster.Stop()
	logger.Debug("throw-away cluster started", "pid", cluster.Pid(), "port", cluster.Port())
	if err := dbtest.CreateTemplate(ctx, cluster.URL("postgres"), "silo_template"); err != nil {
		return err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(),
		dbtest.EnvURL+"="+cluster.URL("postgres"),
		dbtest.EnvTemplate+"=silo_template",
	)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = cmd.Process.Signal(os.Interrupt)
		err = <-done
	}
	return exitStatus(err)
}
