package wire_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The client and the wire types link none of the control plane: no control
// loop, no store, no backend, not the server's handlers. A package that
// crosses this boundary is named with the package that imports it.
func TestBoundary(t *testing.T) {
	const module = "github.com/virga-ml/virga/"
	forbidden := []string{"internal/control", "internal/store", "internal/backend", "internal/api"}
	crosses := func(path string) bool {
		for _, f := range forbidden {
			if path == module+f || (f != "internal/api" && strings.HasPrefix(path, module+f+"/")) {
				return true
			}
		}
		return false
	}
	for _, pkg := range []string{module + "internal/api/client", module + "internal/api/wire"} {
		out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for line := range strings.Lines(string(out)) {
			fields := strings.Fields(line)
			if len(fields) == 0 {
				continue
			}
			for _, imp := range fields[1:] {
				if crosses(imp) {
					t.Errorf("%s depends on %s (imported by %s): a client of the API links none of the control plane", pkg, imp, fields[0])
				}
			}
		}
	}
}
