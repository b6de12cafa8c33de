package sim

import (
	"os"
	"testing"
)

// TestMain runs the package's tests on the engine VIRGA_SIM_ENGINE names:
// "loop" (the control loop, RunLoop) or "legacy".
func TestMain(m *testing.M) {
	switch os.Getenv("VIRGA_SIM_ENGINE") {
	case "loop":
		onLoop = true
	case "legacy":
		onLoop = false
	}
	os.Exit(m.Run())
}
