package server

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The files of this package form layers (doc.go): a file uses only files below it, so no two
// files depend on each other in a circle. The test resolves every identifier with the type
// checker, draws an edge from the file that uses it to the file that declares it, and fails on
// any cycle, naming it.
func TestFilesFormLayers(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		files = append(files, f)
	}
	require.NotEmpty(t, files)
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	pkg, err := conf.Check("github.com/silo-db/silo/server", fset, files, info)
	require.NoError(t, err)

	uses := map[string]map[string]bool{} // file → files it uses
	declaredIn := func(obj types.Object) string {
		if obj == nil || obj.Pkg() != pkg || !obj.Pos().IsValid() {
			return ""
		}
		return fset.Position(obj.Pos()).Filename
	}
	edge := func(at token.Pos, obj types.Object) {
		from, to := fset.Position(at).Filename, declaredIn(obj)
		if to == "" || from == to {
			return
		}
		if uses[from] == nil {
			uses[from] = map[string]bool{}
		}
		uses[from][to] = true
	}
	for id, obj := range info.Uses {
		edge(id.Pos(), obj)
	}
	for sel, s := range info.Selections {
		edge(sel.Sel.Pos(), s.Obj())
	}

	// Depth-first search for a cycle.
	state := map[string]int{} // 0 unseen, 1 on the path, 2 done
	var path []string
	var visit func(f string) []string
	visit = func(f string) []string {
		state[f] = 1
		path = append(path, f)
		deps := make([]string, 0, len(uses[f]))
		for d := range uses[f] {
			deps = append(deps, d)
		}
		slices.Sort(deps)
		for _, d := range deps {
			switch state[d] {
			case 1:
				return append(slices.Clone(path[slices.Index(path, d):]), d)
			case 0:
				if c := visit(d); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		state[f] = 2
		return nil
	}
	for _, name := range names {
		if state[name] == 0 && !strings.HasSuffix(name, "_test.go") {
			require.Nil(t, visit(name), "files of package server depend on each other in a circle")
		}
	}
	require.NotEmpty(t, uses["routes.go"], "the route table uses the handlers")
}
