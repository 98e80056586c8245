package server

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/migrations"
	apisql "github.com/silo-db/silo/sql"
)

// Every SQLSTATE raised in sql/ or in a migration's functions is registered, so it reaches HTTP
// clients with a status and id.
func TestErrorCodesRegistered(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(`ERRCODE\s*=\s*'([0-9A-Z]{5})'`)
	seen := 0
	for name, fsys := range map[string]fs.FS{"sql": apisql.FS, "migrations": migrations.FS} {
		err := fs.WalkDir(fsys, ".", func(f string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(f, ".sql") {
				return err
			}
			b, err := fs.ReadFile(fsys, f)
			require.NoError(t, err)
			for _, m := range re.FindAllStringSubmatch(string(b), -1) {
				seen++
				_, ok := lookupError(m[1])
				require.True(t, ok, "%s/%s raises SQLSTATE %s, which registerError does not know", name, f, m[1])
			}
			return nil
		})
		require.NoError(t, err)
	}
	require.Positive(t, seen)
}
