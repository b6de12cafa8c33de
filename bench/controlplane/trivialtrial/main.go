// Command trivialtrial is the trial of the control-plane benchmark: it reports
// one metric (loss = its hyperparameter x, the first argument) and exits 0.
//
//	trivialtrial X            report over HTTP with sdk/go/trial
//	trivialtrial --stdout X   print a VIRGA_METRIC line for the shim to relay
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/virga-ml/virga/sdk/go/trial"
)

func main() {
	args := os.Args[1:]
	stdout := false
	if len(args) > 0 && args[0] == "--stdout" {
		stdout, args = true, args[1:]
	}
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: trivialtrial [--stdout] X")
		os.Exit(2)
	}
	x, err := strconv.ParseFloat(args[0], 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "trivialtrial:", err)
		os.Exit(2)
	}
	if stdout {
		fmt.Printf("VIRGA_METRIC {\"step\":0,\"metrics\":{\"loss\":%s}}\n", strconv.FormatFloat(x, 'g', -1, 64))
		return
	}
	t, err := trial.FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "trivialtrial:", err)
		os.Exit(1)
	}
	if _, err := t.Report(context.Background(), 0, map[string]float64{"loss": x}); err != nil {
		fmt.Fprintln(os.Stderr, "trivialtrial:", err)
		os.Exit(1)
	}
}
