package server_test

import (
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Pryv's JavaScript client works against Silo unchanged: its batch call, event creation,
// addPointsToHFEvent and the read of a series. It needs Node.js and the client (npm package pryv):
// SILO_PRYV_MODULES names a node_modules folder that holds it, as make test sets it after
// installing the client; a plain go test without it skips, saying how to run it.
func TestSeriesPryvClient(t *testing.T) {
	t.Parallel()
	modules := os.Getenv("SILO_PRYV_MODULES")
	if modules == "" {
		t.Skip("SILO_PRYV_MODULES is not set: run npm install pryv in a folder and set SILO_PRYV_MODULES to its node_modules")
	}
	_, err := os.Stat(filepath.Join(modules, "pryv"))
	require.NoError(t, err, "SILO_PRYV_MODULES names no folder with the pryv client")
	node, err := exec.LookPath("node")
	require.NoError(t, err, "Node.js runs the pryv client")
	b := accountSetup(t)
	u, err := url.Parse(b.srv.URL)
	require.NoError(t, err)
	endpoint := "http://" + b.token + "@" + u.Host + "/alice/"
	cmd := exec.Command(node, filepath.Join("testdata", "pryv_client.js"), endpoint)
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, `{"user":"alice","fields":["deltaTime","value"],"points":[[1,70.25],[2.5,70]],"hasMeta":true}`, strings.TrimSpace(string(out)))
}
