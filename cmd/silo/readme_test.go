package main

// TestReadme runs README.md as a new user would, against a throw-away Silo, so the documentation
// cannot drift from the program. The conventions, for anyone writing a README section:
//
//   - Every ```sh and ```sql block of README.md runs, in the order of the file. A new section
//     joins the test by being written: nothing here names a section.
//   - A block does not run when the line before it (blank lines aside) is an HTML comment that
//     starts with "<!-- not run" and says why, e.g. <!-- not run: starts a server that does not
//     stop -->. Blocks of any other language (```json, ```text, plain ```) are never run.
//   - A ```text or ```json block right after a run block (nothing but blank lines between) is that
//     block's documented output, and the test compares it with what the block printed (stdout
//     and stderr as a terminal shows them, without Silo's log lines). The comparison ignores
//     whitespace, so outputs may be laid out for reading, and masks on both sides what changes
//     from run to run: tokens (silo_<hex>), times (ISO 8601, epoch milliseconds, history pits
//     _YYYYMMDDTHHMISS.mmmZ), numeric JSON ids ("id", "…Id", "…_id") and VCS revisions (12 to
//     40 hex digits). An ellipsis … in a documented output matches anything.
//   - Every block must succeed. A shell block fails when it exits non-zero (it runs under
//     set -e -o pipefail) or, when it has no documented output, when any curl in it receives an
//     HTTP status of 400 or more. A SQL block fails on any SQL error. A block whose failure is
//     the point documents it: its output ends with the line "(exit status N)", or, for SQL, shows
//     the ERROR line (psql then exits 3). Put a failing command last in its block.
//   - Shell blocks run with bash in a scratch directory holding bin/silo (built from this tree),
//     each block starting there, with the variables and functions of the blocks before it.
//     DATABASE_URL names the test's database, and every localhost:8080 becomes the address of the
//     test's Silo (`silo up`, started before the first block), and every -p 8883 (mosquitto_pub's
//     port) the port of its MQTT broker. A `silo` found on the PATH fails:
//     the README calls bin/silo, what `make run` builds.
//   - SQL blocks run through `bin/silo psql -X -v ON_ERROR_STOP=1 -f <block>` on the same database,
//     so command tags (UPDATE 1, CALL) are part of their output, as in psql.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
)

// readmeBlock is one code block of the README that runs, with its documented output.
type readmeBlock struct {
	lang    string // sh or sql
	line    int    // line of the opening fence
	section string // the nearest heading above it
	code    string
	output  *string // documented output; nil when none
}

func (b readmeBlock) name() string { return fmt.Sprintf("README.md:%d (%s)", b.line, b.section) }

// readmeBlocks returns the blocks of the README at path that run, in order.
func readmeBlocks(t *testing.T, path string) []readmeBlock {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()

	type fence struct {
		lang, code string
		line       int
		section    string
		notRun     bool
		follows    bool // only blank lines between the previous block and this one
	}
	var fences []fence
	var section, lastText string
	sinceBlock := -1 // non-blank lines since the last closing fence; -1 before the first block
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if !strings.HasPrefix(line, "```") {
			if strings.HasPrefix(line, "#") {
				section = strings.TrimSpace(line)
			}
			if strings.TrimSpace(line) != "" {
				lastText = strings.TrimSpace(line)
				if sinceBlock >= 0 {
					sinceBlock++
				}
			}
			continue
		}
		fc := fence{lang: strings.TrimSpace(strings.TrimPrefix(line, "```")), line: n, section: section,
			notRun: strings.HasPrefix(lastText, "<!-- not run"), follows: sinceBlock == 0}
		var code strings.Builder
		closed := false
		for sc.Scan() {
			n++
			if strings.HasPrefix(sc.Text(), "```") {
				closed = true
				break
			}
			code.WriteString(sc.Text())
			code.WriteByte('\n')
		}
		require.True(t, closed, "README.md:%d: code block never closed", fc.line)
		fc.code = code.String()
		fences = append(fences, fc)
		sinceBlock, lastText = 0, ""
	}
	require.NoError(t, sc.Err())

	var blocks []readmeBlock
	for i := 0; i < len(fences); i++ {
		fc := fences[i]
		if fc.lang != "sh" && fc.lang != "sql" {
			continue
		}
		var out *string
		if i+1 < len(fences) && fences[i+1].follows && (fences[i+1].lang == "text" || fences[i+1].lang == "json") {
			out = &fences[i+1].code
			i++
		}
		if fc.notRun {
			continue
		}
		blocks = append(blocks, readmeBlock{lang: fc.lang, line: fc.line, section: fc.section, code: fc.code, output: out})
	}
	return blocks
}

// readmeDriver runs one shell block: it restores the variables and functions the earlier blocks
// left ($SILO_README_STATE), runs the block under set -e -o pipefail in the scratch directory and,
// however it ends, saves its variables and functions for the next block.
const readmeDriver = `__silo_readme_base=" $(compgen -v | tr '\n' ' ') "
[ -f "$SILO_README_STATE" ] && source "$SILO_README_STATE"
__silo_readme_save() {
	local __silo_readme_rc=$? __silo_readme_n
	{
		for __silo_readme_n in $(compgen -v); do
			case "$__silo_readme_base" in *" $__silo_readme_n "*) continue ;; esac
			case "$__silo_readme_n" in __silo_readme*) continue ;; esac
			declare -p "$__silo_readme_n"
		done
		declare -f
	} >"$SILO_README_STATE.new" 2>/dev/null && mv "$SILO_README_STATE.new" "$SILO_README_STATE"
	exit $__silo_readme_rc
}
trap __silo_readme_save EXIT
cd "$SILO_README_DIR"
# curl's write-out (its HTTP status marker) goes to a file of the block's: on the shared output,
# curl's unbuffered stderr could interleave with what a pipe (tee) writes of the body.
curl() { command curl "$@" 2>>"$SILO_README_CURL"; }
set -e -o pipefail
source "$1"
`

// Each curl of a block reports its HTTP status on stderr through this marker (the test's .curlrc),
// which the driver sends to a file of the block's ($SILO_README_CURL); the markers are read from
// there, and anything else curl wrote there is added to the output.
var (
	curlMarker = regexp.MustCompile(`<<silo-readme http (\d{3})>>`)
	logLine    = regexp.MustCompile(`(?m)^time=\S+ level=\S+ .*$`)
	psqlPrefix = regexp.MustCompile(`(?m)^psql:[^\n]*?:\d+: `)
	exitLine   = regexp.MustCompile(`\(exit status (\d+)\)\s*$`)
	masks      = []struct {
		re   *regexp.Regexp
		repl string
	}{
		{regexp.MustCompile(`silo_[0-9a-f]{64}`), "silo_<token>"},
		{regexp.MustCompile(`_\d{8}T\d{6}\.\d{3}Z`), "_<pit>"},
		{regexp.MustCompile(`\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}(:\d{2})?)?`), "<time>"},
		{regexp.MustCompile(`\b1\d{12}\b`), "<time>"},
		{regexp.MustCompile(`("(?:id|\w*Id|\w*_id)"\s*:\s*)\d+`), "${1}<id>"},
		{regexp.MustCompile(`\b[0-9a-f]{12,40}\b`), "<rev>"},
		{regexp.MustCompile(`-{2,}`), "--"}, // psql's rule lines, whose width follows the values
		{regexp.MustCompile(`\s+`), ""},
	}
)

func readmeNormalize(s string) string {
	for _, m := range masks {
		s = m.re.ReplaceAllString(s, m.repl)
	}
	return s
}

// readmeMatch reports whether got (already cleaned of markers and logs) is the documented output
// want, whose … matches anything.
func readmeMatch(want, got string) bool {
	parts := strings.Split(readmeNormalize(want), "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(`^(?s)` + strings.Join(parts, `.*?`) + `$`).MatchString(readmeNormalize(got))
}

func TestReadme(t *testing.T) {
	blocks := readmeBlocks(t, filepath.Join("..", "..", "README.md"))
	require.NotEmpty(t, blocks)

	bin := buildSilo(t)
	dbURL := dbtest.URL(t)
	addr, mqttAddr := freeAddr(t), freeAddr(t)
	_, mqttPort, err := net.SplitHostPort(mqttAddr)
	require.NoError(t, err)
	dir := t.TempDir()
	work := filepath.Join(dir, "work") // the user's checkout: bin/silo
	require.NoError(t, os.MkdirAll(filepath.Join(work, "bin"), 0o755))
	require.NoError(t, os.Symlink(bin, filepath.Join(work, "bin", "silo")))
	guard := filepath.Join(dir, "guard") // a silo on the PATH fails
	require.NoError(t, os.MkdirAll(guard, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(guard, "silo"),
		[]byte("#!/bin/sh\necho 'README examples call bin/silo, not a silo from the PATH' >&2\nexit 127\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".curlrc"),
		[]byte(`write-out = "%{stderr}\n<<silo-readme http %{http_code}>>\n"`+"\n"), 0o644))
	driver := filepath.Join(dir, "driver.sh")
	require.NoError(t, os.WriteFile(driver, []byte(readmeDriver), 0o644))

	env := []string{"DATABASE_URL=" + dbURL, "SILO_DATA_DIR=" + filepath.Join(dir, "data"),
		"PATH=" + guard + string(os.PathListSeparator) + os.Getenv("PATH"), "CURL_HOME=" + dir,
		"SILO_README_DIR=" + work, "SILO_README_STATE=" + filepath.Join(dir, "state.sh")}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "PATH" || k == "CURL_HOME" || k == "SILO_DATA_DIR" || k == "DATABASE_URL" || k == "BASH_ENV" || k == "ENV":
		case strings.HasPrefix(k, "SILO_") && !strings.HasPrefix(k, "SILO_PG_BIN"):
		default:
			env = append(env, kv)
		}
	}

	// The Silo the README talks to: `silo up` on the test's database, stopped by its pid.
	upLog, err := os.Create(filepath.Join(dir, "silo-up.log"))
	require.NoError(t, err)
	defer upLog.Close()
	up := exec.Command(bin, "up")
	up.Env = append(env, "SILO_ADDR="+addr, "SILO_MQTT_ADDR="+mqttAddr)
	up.Stdout, up.Stderr = upLog, upLog
	require.NoError(t, up.Start())
	upDone := make(chan struct{})
	go func() { _ = up.Wait(); close(upDone) }()
	t.Cleanup(func() {
		_ = up.Process.Signal(syscall.SIGTERM)
		select {
		case <-upDone:
		case <-time.After(20 * time.Second):
			_ = up.Process.Kill()
			<-upDone
		}
		if t.Failed() {
			if b, err := os.ReadFile(upLog.Name()); err == nil {
				t.Logf("silo up's log:\n%s", readmeTail(string(b), 40))
			}
		}
	})
	waitReady(t, addr, upDone)

	for i, b := range blocks {
		code := strings.ReplaceAll(strings.ReplaceAll(b.code, "localhost:8080", addr), "-p 8883", "-p "+mqttPort)
		file := filepath.Join(dir, fmt.Sprintf("block-%03d.%s", i, b.lang))
		require.NoError(t, os.WriteFile(file, []byte(code), 0o644))
		var cmd *exec.Cmd
		if b.lang == "sh" {
			cmd = exec.Command("bash", driver, file)
		} else {
			cmd = exec.Command(filepath.Join(work, "bin", "silo"), "psql", "-X", "-v", "ON_ERROR_STOP=1", "-f", file)
		}
		curlFile := filepath.Join(dir, fmt.Sprintf("curl-%03d.txt", i))
		out, rc := runReadmeBlock(t, cmd, work, append(env, "SILO_README_CURL="+curlFile))
		curlOut, err := os.ReadFile(curlFile)
		if err != nil && !os.IsNotExist(err) {
			require.NoError(t, err)
		}
		out += string(curlOut)

		var statuses []int
		for _, m := range curlMarker.FindAllStringSubmatch(out, -1) {
			s, _ := strconv.Atoi(m[1])
			statuses = append(statuses, s)
		}
		out = curlMarker.ReplaceAllString(out, "")
		out = logLine.ReplaceAllString(out, "")
		out = psqlPrefix.ReplaceAllString(out, "")

		wantRC := 0
		var want string
		if b.output != nil {
			want = strings.ReplaceAll(*b.output, "localhost:8080", addr)
			if m := exitLine.FindStringSubmatch(want); m != nil {
				wantRC, _ = strconv.Atoi(m[1])
				want = want[:len(want)-len(m[0])]
			} else if b.lang == "sql" && strings.Contains(want, "ERROR:") {
				wantRC = 3
			}
		}
		switch {
		case rc != wantRC:
			t.Errorf("%s: exit status %d, want %d\n--- block\n%s--- output\n%s", b.name(), rc, wantRC, b.code, out)
		case b.output == nil && readmeFailedStatus(statuses) >= 0:
			t.Errorf("%s: a curl received HTTP %03d; an undocumented response must be a success\n--- block\n%s--- output\n%s",
				b.name(), readmeFailedStatus(statuses), b.code, out)
		case b.output != nil && !readmeMatch(want, out):
			t.Errorf("%s: output differs from the README\n--- block\n%s--- README shows\n%s--- got\n%s",
				b.name(), b.code, *b.output, out)
		}
	}
	t.Logf("ran %d blocks of README.md", len(blocks))
}

// runReadmeBlock runs cmd in dir with env, with its own process group killed when it outlives its
// 60 s, and returns its output (stdout and stderr as one stream) and exit status.
func runReadmeBlock(t *testing.T, cmd *exec.Cmd, dir string, env []string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second // a background child holding the output open
	require.NoError(t, cmd.Start())
	pgid := cmd.Process.Pid
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
		t.Fatalf("README block did not finish within 60 s; output so far:\n%s", out.String())
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // whatever the block left running in the background
	if exitErr, ok := err.(*exec.ExitError); ok {
		return out.String(), exitErr.ExitCode()
	}
	require.NoError(t, err)
	return out.String(), 0
}

// readmeFailedStatus is the first HTTP status of 400 or more, or 0 (no response), among statuses;
// -1 when there is none.
func readmeFailedStatus(statuses []int) int {
	for _, s := range statuses {
		if s >= 400 || s == 0 {
			return s
		}
	}
	return -1
}

func readmeTail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
