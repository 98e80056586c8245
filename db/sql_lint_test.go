package db_test

// The lint of sql/: plpgsql_check over every PL/pgSQL function and procedure of the schemas the
// api rebuild owns (api and every <domain>_private), so that a misspelt column or variable in a
// branch no test takes fails the suite instead of a caller. PL/pgSQL itself only parses a body
// when the function is created; the statements inside are planned the first time they run.

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
)

// lintFinding is one row of plpgsql_check_function_tb about one function.
type lintFinding struct {
	Function string // regprocedure, with the trigger it was checked for
	Line     int    // 0: about the whole function
	Level    string // error, warning, warning extra, security
	SQLState string
	Message  string
	Detail   string
	Hint     string
	Query    string
}

func (f lintFinding) String() string {
	s := fmt.Sprintf("%s line %d: %s %s: %s", f.Function, f.Line, f.Level, f.SQLState, f.Message)
	if f.Detail != "" {
		s += " (" + f.Detail + ")"
	}
	if f.Hint != "" {
		s += " hint: " + f.Hint
	}
	if f.Query != "" {
		s += "\n\tin: " + strings.Join(strings.Fields(f.Query), " ")
	}
	return s
}

// failingWarnings are the warnings that fail the lint like errors: each says a statement does not
// do what it reads as doing, which PL/pgSQL accepts without complaint.
//   - a variable declared and never used, or assigned and never read: a misspelt name, or a result
//     computed and then dropped;
//   - an INTO list longer or shorter than the query's columns: values silently lost or left NULL;
//   - RAISE or format() placeholders that do not match their arguments.
//
// Every other warning is logged and passes, because Silo writes it on purpose: "target type is
// different type than source type" for an array initialised with '{}' (PL/pgSQL converts the
// literal correctly), an unused parameter kept in a public signature for named-argument calls, an
// OUT column left NULL on some path, a heuristic SQL-injection warning on dynamic SQL, a
// statement kept after a RAISE. Performance warnings (hidden casts, indexes a cast may disable)
// are not requested at all: they are for benchmarks, not for correctness. A function that needs
// an exception to this rule says so in its body with a `@plpgsql_check_options:` comment, which
// plpgsql_check reads.
var failingWarnings = regexp.MustCompile(`^(unused variable "|never read variable "|` +
	`too (few|many) attributes for (target variables|composite variable)|` +
	`too (few|many) parameters specified for RAISE|` +
	`unused parameters of function "format"|too few arguments for format\(\))`)

// fails reports whether the finding fails the lint.
func (f lintFinding) fails() bool {
	return f.Level == "error" || failingWarnings.MatchString(f.Message)
}

// lintSetup creates plpgsql_check in its own schema inside tx (rolled back with it). When the
// server lacks the extension, the test fails with what to install: the lint is part of the suite
// and must not be skipped silently.
func lintSetup(t *testing.T, tx pgx.Tx) {
	t.Helper()
	ctx := context.Background()
	var available bool
	var major int
	require.NoError(t, tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_available_extensions WHERE name = 'plpgsql_check'),
		current_setting('server_version_num')::integer / 10000`).Scan(&available, &major))
	if !available {
		t.Fatalf("the PostgreSQL server has no plpgsql_check extension, which lints sql/: install "+
			"Debian's postgresql-%d-plpgsql-check package (make test installs it when run as root)", major)
	}
	_, err := tx.Exec(ctx, `CREATE SCHEMA plpgsql_check; CREATE EXTENSION plpgsql_check SCHEMA plpgsql_check`)
	require.NoError(t, err)
}

// lintTarget is one check: a function, and for a trigger function one trigger it fires for (the
// table gives NEW and OLD their row type; the transition table names are relations in its body).
type lintTarget struct {
	Function           string
	FuncOID, RelOID    uint32
	Trigger            string
	IsTrigger          bool
	OldTable, NewTable *string
}

// lintSQL runs plpgsql_check over every PL/pgSQL function and procedure in schema api, in schema
// partition (the functions domain migrations call) and in every schema whose name ends in _private, once per trigger for trigger functions. It returns the
// findings and the number of checks run. Each check runs in a savepoint, so a function that makes
// the checker itself raise is reported as an error and the others are still checked.
func lintSQL(t *testing.T, tx pgx.Tx) ([]lintFinding, int) {
	t.Helper()
	ctx := context.Background()
	rows, err := tx.Query(ctx, `
		SELECT p.oid::regprocedure::text AS function, p.oid AS func_oid,
		       coalesce(tg.tgrelid, 0) AS rel_oid,
		       coalesce(tg.tgname || ' on ' || tg.tgrelid::regclass::text, '') AS trigger,
		       p.prorettype = 'pg_catalog.trigger'::pg_catalog.regtype AS is_trigger,
		       tg.tgoldtable::text AS old_table, tg.tgnewtable::text AS new_table
		  FROM pg_catalog.pg_proc p
		  JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
		  JOIN pg_catalog.pg_language l ON l.oid = p.prolang
		  LEFT JOIN pg_catalog.pg_trigger tg ON tg.tgfoid = p.oid
		 WHERE l.lanname = 'plpgsql'
		   AND (n.nspname IN ('api', 'partition') OR n.nspname LIKE '%\_private')
		 ORDER BY 1, 4`)
	require.NoError(t, err)
	targets, err := pgx.CollectRows(rows, pgx.RowToStructByName[lintTarget])
	require.NoError(t, err)

	var findings []lintFinding
	seen := map[string]bool{}
	for _, tg := range targets {
		where := tg.Function
		if tg.Trigger != "" {
			where += " (trigger " + tg.Trigger + ")"
		}
		if tg.IsTrigger && tg.RelOID == 0 {
			findings = append(findings, lintFinding{Function: where, Level: "error",
				Message: "trigger function attached to no table: it cannot be checked, and nothing calls it"})
			continue
		}
		var got []lintFinding
		err := dbtest.Savepoint(t, tx, func(sp pgx.Tx) error {
			rows, err := sp.Query(ctx, `
				SELECT coalesce(lineno, 0), level, coalesce(sqlstate, ''), message,
				       coalesce(detail, ''), coalesce(hint, ''), coalesce(query, '')
				  FROM plpgsql_check.plpgsql_check_function_tb($1::oid::regprocedure, $2::oid::regclass,
				       fatal_errors => false, other_warnings => true, extra_warnings => true,
				       performance_warnings => false, security_warnings => true,
				       oldtable => $3::name, newtable => $4::name)`,
				tg.FuncOID, tg.RelOID, tg.OldTable, tg.NewTable)
			if err != nil {
				return err
			}
			got, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (lintFinding, error) {
				f := lintFinding{Function: where}
				return f, row.Scan(&f.Line, &f.Level, &f.SQLState, &f.Message, &f.Detail, &f.Hint, &f.Query)
			})
			return err
		})
		if err != nil {
			got = []lintFinding{{Function: where, Level: "error", Message: "plpgsql_check failed: " + err.Error()}}
		}
		// A trigger function fired by several triggers is checked once per trigger; what an
		// earlier trigger's check already found is reported once.
		var keys []string
		for _, f := range got {
			key := fmt.Sprint(tg.Function, f.Line, f.Level, f.SQLState, f.Message, f.Detail)
			if !seen[key] {
				findings = append(findings, f)
			}
			keys = append(keys, key)
		}
		for _, key := range keys {
			seen[key] = true
		}
	}
	return findings, len(targets)
}

func TestSQLLint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	lintSetup(t, tx)

	// Today's sql/: every error, and every warning of failingWarnings, fails; the other warnings
	// are logged.
	t.Run("sql", func(t *testing.T) {
		findings, checked := lintSQL(t, tx)
		require.Positive(t, checked, "no PL/pgSQL function found in api or a *_private schema")
		t.Logf("%d checks of PL/pgSQL functions", checked)
		for _, f := range findings {
			if f.fails() {
				t.Errorf("%s", f)
			} else {
				t.Logf("%s", f)
			}
		}
	})

	// The lint can fail: each case creates functions with a mistake PL/pgSQL accepts at CREATE
	// time in a savepoint, lints, and rolls back.
	errCanary := errors.New("canary rolled back")
	for _, tc := range []struct {
		name string
		sql  string
		want []string // the failing findings, as "<function> line <n>: <level> <sqlstate>: <message>" prefixes
		pass []string // findings that must be reported without failing
	}{
		{
			name: "misspelt column in a branch never taken",
			sql: `CREATE FUNCTION api.lint_canary(p_flag boolean) RETURNS bigint LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_n bigint := 0;
BEGIN
    IF p_flag THEN
        SELECT count(*) INTO v_n FROM pg_catalog.pg_class WHERE relnmae = 'x';
    END IF;
    RETURN v_n;
END $$`,
			want: []string{`api.lint_canary(boolean) line 6: error 42703: column "relnmae" does not exist`},
		},
		{
			name: "procedure in a private schema",
			sql: `CREATE SCHEMA lintcanary_private;
CREATE PROCEDURE lintcanary_private.lint_canary(p_flag boolean) LANGUAGE plpgsql AS $$
BEGIN
    IF p_flag THEN
        PERFORM FROM pg_catalog.pg_class WHERE relnmae = 'x';
    END IF;
END $$`,
			want: []string{`lintcanary_private.lint_canary(boolean) line 4: error 42703: column "relnmae" does not exist`},
		},
		{
			name: "row trigger: misspelt field of NEW",
			sql: `CREATE TABLE lintcanary_rows (id integer, value text);
CREATE FUNCTION api.tg_lintcanary_rows__fill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.value IS NULL THEN
        NEW.vlaue := 'x';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER fill BEFORE INSERT ON lintcanary_rows FOR EACH ROW EXECUTE FUNCTION api.tg_lintcanary_rows__fill()`,
			want: []string{`api.tg_lintcanary_rows__fill() (trigger fill on lintcanary_rows) line 4: error 42703: record "new" has no field "vlaue"`},
		},
		{
			name: "statement trigger: misspelt column of the transition table",
			sql: `CREATE TABLE lintcanary_rows (id integer, value text);
CREATE FUNCTION api.tg_lintcanary_rows__notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT count(*) FROM added) > 1000 THEN
        PERFORM pg_catalog.pg_notify('lintcanary', (SELECT string_agg(vlaue, ',') FROM added));
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER notify AFTER INSERT ON lintcanary_rows REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION api.tg_lintcanary_rows__notify()`,
			want: []string{`api.tg_lintcanary_rows__notify() (trigger notify on lintcanary_rows) line 4: error 42703: column "vlaue" does not exist`},
		},
		{
			name: "warnings: unused variable fails, an array initialised with '{}' passes",
			sql: `CREATE FUNCTION api.lint_canary() RETURNS text[] LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_out    text[] := '{}';
    v_unused integer;
BEGIN
    RETURN v_out;
END $$`,
			want: []string{`api.lint_canary() line 4: warning 00000: unused variable "v_unused"`},
			pass: []string{`api.lint_canary() line 5: warning 42804: target type is different type than source type`},
		},
	} {
		t.Run("canary/"+tc.name, func(t *testing.T) {
			var failing, passing []string
			err := dbtest.Savepoint(t, tx, func(sp pgx.Tx) error {
				if _, err := sp.Exec(ctx, tc.sql); err != nil {
					return err
				}
				findings, _ := lintSQL(t, sp)
				for _, f := range findings {
					if !strings.Contains(f.Function, "lint_canary") && !strings.Contains(f.Function, "lintcanary") {
						continue // today's sql/, linted above
					}
					if f.fails() {
						failing = append(failing, f.String())
					} else {
						passing = append(passing, f.String())
					}
				}
				return errCanary
			})
			require.ErrorIs(t, err, errCanary)
			require.Len(t, failing, len(tc.want), "failing findings:\n%s", strings.Join(failing, "\n"))
			for i, w := range tc.want {
				require.True(t, strings.HasPrefix(failing[i], w), "want %q, got %q", w, failing[i])
			}
			for _, p := range tc.pass {
				require.True(t, hasPrefix(passing, p), "want a passing %q among:\n%s", p, strings.Join(passing, "\n"))
			}
		})
	}
}

func hasPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}
