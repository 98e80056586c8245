package main

import (
	"regexp"
	"runtime/debug"
	"strings"
)

// pseudoVersion matches the versions Go makes up for an untagged commit
// (v0.0.0-20260102150405-abcdef123456, v1.2.4-0.20260102150405-abcdef123456).
var pseudoVersion = regexp.MustCompile(`[-.]\d{14}-[0-9a-f]{12}(\+dirty)?$`)

// version says which Silo this is: the module version of a build from a tagged module
// (go install github.com/silo-db/silo/cmd/silo@v1.2.3, or a checkout at a tag), else the commit it
// was built from, its time, and "dirty" when the work tree had changes.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "silo (no build information)"
	}
	return "silo " + describeBuild(bi)
}

func describeBuild(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v != "" && v != "(devel)" && !pseudoVersion.MatchString(v) {
		return v
	}
	var rev, at string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		if v != "" && v != "(devel)" {
			return v // a pseudo-version names the commit and its time
		}
		return "(devel: built without version control information, as with -buildvcs=false)"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	var extra []string
	if at != "" {
		extra = append(extra, at)
	}
	if dirty {
		extra = append(extra, "dirty")
	}
	if len(extra) == 0 {
		return rev
	}
	return rev + " (" + strings.Join(extra, ", ") + ")"
}
