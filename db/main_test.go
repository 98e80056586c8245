package db_test

import (
	"testing"

	"github.com/silo-db/silo/db/dbtest"
)

// TestMain runs the package's tests against the harness's throw-away cluster.
func TestMain(m *testing.M) { dbtest.Main(m) }
