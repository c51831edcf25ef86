// Package version reports which Ordo build is running. It must never depend
// on another Ordo package.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is set at link time (-ldflags "-X …/version.Version=v0.1.0");
// otherwise it is the module version recorded in the build, or "dev".
var Version = ""

// String returns "ordo <version> (<go version>, <commit>)".
func String() string {
	v, commit := Version, ""
	if info, ok := debug.ReadBuildInfo(); ok {
		if v == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				commit = s.Value[:12]
			}
		}
	}
	if v == "" {
		v = "dev"
	}
	if commit != "" {
		return fmt.Sprintf("%s (%s, %s)", v, runtime.Version(), commit)
	}
	return fmt.Sprintf("%s (%s)", v, runtime.Version())
}
