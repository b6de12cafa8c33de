package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/client"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/checkpoint"
	"github.com/virga-ml/virga/internal/registry"
)

// refHelp says how a model version is named on the command line.
const refHelp = "A model is named NAME (its newest version), NAME@ALIAS (the version the alias points at) or NAME:N (version N)."

func newModelsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "models",
		Short: "The model registry: register trained models, name versions with aliases, show and download them",
		Long: "The model registry keeps named models whose versions are model directories (a virga-model.json and the " +
			"files it names) taken from a trial's checkpoint (its model/ folder) or a directory, with their lineage.\n" + refHelp,
	}
	cmd.AddCommand(newModelsLsCmd(g), newModelsShowCmd(g), newModelsRegisterCmd(g), newModelsAliasCmd(g),
		newModelsRmCmd(g), newModelsDownloadCmd(g))
	return cmd
}

// withClient makes a command body that calls fn with a client of the configured server.
func (g *globals) withClient(fn func(ctx context.Context, c *client.Client, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, done, err := g.client(cmd.Context())
		if err != nil {
			return err
		}
		defer done()
		return fn(cmd.Context(), c, args)
	}
}

// parseRef reads a model reference argument; a bad one is a usage error.
func parseRef(s string) (virga.ModelRef, error) {
	ref, err := virga.ParseModelRef(s)
	if err != nil {
		return ref, usageError{err}
	}
	return ref, nil
}

func newModelsLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List the registered models",
		Args:  cobra.NoArgs,
		RunE: g.withClient(func(ctx context.Context, c *client.Client, _ []string) error {
			ms, err := c.Models(ctx)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(ms)
			}
			rows := make([][]string, 0, len(ms))
			for _, m := range ms {
				rows = append(rows, []string{m.Name, strconv.Itoa(m.Versions), strconv.FormatInt(m.Latest, 10),
					fmtAliases(m.Aliases), fmtTime(m.UpdatedAt)})
			}
			table(g.stdout, []string{"NAME", "VERSIONS", "LATEST", "ALIASES", "UPDATED"}, rows)
			return nil
		}),
	}
}

// fmtAliases prints aliases as prod=2, staging=3, by name.
func fmtAliases(as map[string]int64) string {
	if len(as) == 0 {
		return "-"
	}
	names := make([]string, 0, len(as))
	for a := range as {
		names = append(names, a)
	}
	sort.Strings(names)
	for i, a := range names {
		names[i] = a + "=" + strconv.FormatInt(as[a], 10)
	}
	return strings.Join(names, ", ")
}

// ModelShow is what `virga models show --json` prints: the version named,
// and every version and alias of its model.
type ModelShow struct {
	Version  *wire.ModelVersionView `json:"version"`
	Versions []*virga.ModelVersion  `json:"versions"`
	Aliases  []virga.ModelAlias     `json:"aliases"`
}

func newModelsShowCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "show MODEL",
		Short: "Show a model version: files, signature, lineage, metrics; and the model's versions and aliases",
		Long:  "Show a model version. " + refHelp,
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(ctx context.Context, c *client.Client, args []string) error {
			ref, err := parseRef(args[0])
			if err != nil {
				return err
			}
			v, err := c.ModelVersion(ctx, ref)
			if err != nil {
				return err
			}
			m, err := c.Model(ctx, ref.Name)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(ModelShow{Version: v, Versions: m.Versions, Aliases: m.Aliases})
			}
			w := g.stdout
			fmt.Fprintf(w, "model %s version %d", v.Name, v.Version)
			if len(v.Aliases) > 0 {
				fmt.Fprintf(w, " (%s)", strings.Join(v.Aliases, ", "))
			}
			fmt.Fprintln(w)
			if v.Description != "" {
				fmt.Fprintf(w, "  description: %s\n", v.Description)
			}
			fmt.Fprintf(w, "  format:      %s\n", v.Format)
			fmt.Fprintf(w, "  files:       %d files, %d bytes (%s)\n", v.Files, v.Size, v.FilesID)
			fmt.Fprintf(w, "  inputs:      %s\n", fmtTensors(v.Signature.Inputs))
			fmt.Fprintf(w, "  outputs:     %s\n", fmtTensors(v.Signature.Outputs))
			if v.TrialID != 0 {
				fmt.Fprintf(w, "  from:        experiment %d, trial %d, checkpoint %.12s at step %d\n", v.ExperimentID, v.TrialID, v.CheckpointID, v.Step)
				fmt.Fprintf(w, "  hparams:     %s\n", fmtHParams(v.HParams, 0))
			} else {
				fmt.Fprintf(w, "  from:        an uploaded directory\n")
			}
			if len(v.Metrics) > 0 {
				names := make([]string, 0, len(v.Metrics))
				for k := range v.Metrics {
					names = append(names, k)
				}
				sort.Strings(names)
				for i, k := range names {
					names[i] = fmt.Sprintf("%s=%g", k, v.Metrics[k])
				}
				fmt.Fprintf(w, "  metrics:     %s\n", strings.Join(names, " "))
			}
			fmt.Fprintf(w, "  registered:  %s\n", fmtTime(v.CreatedAt))
			byVersion := map[int64][]string{}
			for _, a := range m.Aliases {
				byVersion[a.Version] = append(byVersion[a.Version], a.Alias)
			}
			fmt.Fprintf(w, "\nversions of %s:\n", v.Name)
			for _, mv := range m.Versions {
				mark := " "
				if mv.Version == v.Version {
					mark = "*"
				}
				from := "upload"
				if mv.TrialID != 0 {
					from = fmt.Sprintf("trial %d step %d", mv.TrialID, mv.Step)
				}
				fmt.Fprintf(w, " %s %d  %s  %s", mark, mv.Version, fmtTime(mv.CreatedAt), from)
				if as := byVersion[mv.Version]; len(as) > 0 {
					fmt.Fprintf(w, "  [%s]", strings.Join(as, ", "))
				}
				fmt.Fprintln(w)
			}
			return nil
		}),
	}
}

// fmtTensors prints a signature's side as name FP32[-1,64], ...
func fmtTensors(ts []virga.ModelTensor) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		dims := make([]string, len(t.Shape))
		for j, d := range t.Shape {
			dims[j] = strconv.FormatInt(d, 10)
		}
		parts[i] = fmt.Sprintf("%s %s[%s]", t.Name, t.Datatype, strings.Join(dims, ","))
	}
	return strings.Join(parts, ", ")
}

func newModelsRegisterCmd(g *globals) *cobra.Command {
	var (
		fromExperiment, fromTrial int64
		best                      bool
		fromDir, description      string
	)
	cmd := &cobra.Command{
		Use:   "register NAME (--from-experiment ID --best | --from-trial ID | --from-dir DIR)",
		Short: "Register the next version of a model from an experiment's best trial, a trial, or a model directory",
		Long: "Register the next version of model NAME. With --from-experiment and --best, or --from-trial, its files are " +
			"the model/ folder of the trial's latest checkpoint that has one (the trainer writes it; see docs/models.md); " +
			"--best picks the trial as `virga best` does. With --from-dir, DIR is a model directory (holding virga-model.json), uploaded.",
		Args: cobra.ExactArgs(1),
		// The arguments and a --from-dir directory are checked before
		// connecting, so that a mistake is a usage error with or without a
		// server.
		PreRunE: func(_ *cobra.Command, args []string) error {
			if err := virga.CheckModelName(args[0]); err != nil {
				return usageError{err}
			}
			given := 0
			for _, set := range []bool{fromExperiment != 0, fromTrial != 0, fromDir != ""} {
				if set {
					given++
				}
			}
			switch {
			case given != 1:
				return usageError{errors.New("say where the model comes from: one of --from-experiment ID --best, --from-trial ID or --from-dir DIR")}
			case fromExperiment != 0 && !best:
				return usageError{errors.New("--from-experiment needs --best (the model of the experiment's best trial)")}
			case best && fromExperiment == 0:
				return usageError{errors.New("--best goes with --from-experiment")}
			case fromExperiment < 0 || fromTrial < 0:
				return usageError{errors.New("--from-experiment, --from-trial: want a positive ID")}
			}
			if fromDir != "" {
				if err := checkDirFlag("--from-dir", fromDir); err != nil {
					return err
				}
				// Checked here so that an error names the local file.
				if _, err := registry.ReadManifest(fromDir, fromDir); err != nil {
					return usageError{err}
				}
			}
			return nil
		},
		RunE: g.withClient(func(ctx context.Context, c *client.Client, args []string) error {
			name := args[0]
			var v *virga.ModelVersion
			var err error
			if fromDir != "" {
				v, err = registerDir(ctx, c, name, fromDir, description)
			} else {
				v, err = c.RegisterModel(ctx, name, wire.RegisterModelRequest{ExperimentID: fromExperiment, Best: best,
					TrialID: fromTrial, Description: description})
			}
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(v)
			}
			from := "from " + fromDir
			if v.TrialID != 0 {
				from = fmt.Sprintf("from trial %d (experiment %d), checkpoint %.12s at step %d", v.TrialID, v.ExperimentID, v.CheckpointID, v.Step)
			}
			fmt.Fprintf(g.stdout, "registered %s:%d %s: %s, %d files, %d bytes\n", v.Name, v.Version, from, v.Format, v.Files, v.Size)
			return nil
		}),
	}
	f := cmd.Flags()
	f.Int64Var(&fromExperiment, "from-experiment", 0, "the experiment whose best trial's model to register (with --best)")
	f.BoolVar(&best, "best", false, "with --from-experiment: its best trial by the objective")
	f.Int64Var(&fromTrial, "from-trial", 0, "the trial whose model to register")
	f.StringVar(&fromDir, "from-dir", "", "a model directory (holding virga-model.json) to upload")
	f.StringVar(&description, "description", "", "a description of the version")
	return cmd
}

// registerDir uploads dir, a model directory the command has checked, as a
// tar archive.
func registerDir(ctx context.Context, c *client.Client, name, dir, description string) (*virga.ModelVersion, error) {
	pr, pw := io.Pipe()
	go func() {
		_, err := checkpoint.WriteArchive(pw, dir)
		pw.CloseWithError(err)
	}()
	v, err := c.RegisterModelArchive(ctx, name, pr, description)
	pr.CloseWithError(errors.New("upload ended"))
	return v, err
}

func newModelsAliasCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "alias NAME ALIAS VERSION",
		Short: "Point an alias (e.g. prod) at a version of a model, creating or moving it",
		Args:  cobra.ExactArgs(3),
		RunE: g.withClient(func(ctx context.Context, c *client.Client, args []string) error {
			name, alias := args[0], args[1]
			if err := virga.CheckModelName(name); err != nil {
				return usageError{err}
			}
			if err := virga.CheckAliasName(alias); err != nil {
				return usageError{err}
			}
			version, err := strconv.ParseInt(strings.TrimPrefix(args[2], name+":"), 10, 64)
			if err != nil || version < 1 {
				return usageError{fmt.Errorf("VERSION %q: want a version number (1, 2, ...)", args[2])}
			}
			a, err := c.SetModelAlias(ctx, name, alias, version)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(a)
			}
			fmt.Fprintf(g.stdout, "%s@%s -> version %d\n", a.Name, a.Alias, a.Version)
			return nil
		}),
	}
}

func newModelsRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME:N | NAME@ALIAS",
		Short: "Delete a model version (and its files, unless another version has the same) or an alias",
		Long: "Delete version N of a model, which no alias may point at (move or delete the aliases first); its files go " +
			"with it unless another version has the same. NAME@ALIAS deletes the alias only.",
		Args: cobra.ExactArgs(1),
		RunE: g.withClient(func(ctx context.Context, c *client.Client, args []string) error {
			ref, err := parseRef(args[0])
			if err != nil {
				return err
			}
			if ref.Latest() {
				return usageError{fmt.Errorf("%s: say which version (%s:N) or alias (%s@ALIAS) to delete", args[0], ref.Name, ref.Name)}
			}
			if ref.Alias != "" {
				a, err := c.DeleteModelAlias(ctx, ref.Name, ref.Alias)
				if err != nil {
					return err
				}
				if g.json {
					return g.printJSON(a)
				}
				fmt.Fprintf(g.stdout, "deleted alias %s@%s (it pointed at version %d)\n", a.Name, a.Alias, a.Version)
				return nil
			}
			v, err := c.DeleteModelVersion(ctx, ref.Name, ref.Version)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(v)
			}
			fmt.Fprintf(g.stdout, "deleted %s:%d\n", v.Name, v.Version)
			return nil
		}),
	}
}

func newModelsDownloadCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "download MODEL DIR",
		Short: "Download a model version's files into DIR (new or empty)",
		Long:  "Download a model version's model directory into DIR, which must not exist or be empty. " + refHelp,
		Args:  cobra.ExactArgs(2),
		RunE: g.withClient(func(ctx context.Context, c *client.Client, args []string) error {
			ref, err := parseRef(args[0])
			if err != nil {
				return err
			}
			dir := args[1]
			if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
				return usageError{fmt.Errorf("%s: not empty; download into a new or empty directory", dir)}
			} else if err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			v, err := c.ModelVersion(ctx, ref) // pin the version: an alias may move meanwhile
			if err != nil {
				return err
			}
			pinned := virga.ModelRef{Name: v.Name, Version: v.Version}
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(c.DownloadModel(ctx, pinned, pw)) }()
			info, err := checkpoint.ExtractArchive(pr, dir, -1)
			pr.CloseWithError(errors.New("download ended"))
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(map[string]any{"version": v, "dir": dir, "files": info.Files, "size": info.Size})
			}
			abs, _ := filepath.Abs(dir)
			fmt.Fprintf(g.stdout, "downloaded %s (%d files, %d bytes) into %s\n", pinned, info.Files, info.Size, abs)
			return nil
		}),
	}
}

// checkDirFlag checks that the directory a flag names exists and is a
// directory; if not, a usage error says which.
func checkDirFlag(flag, dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return usageError{fmt.Errorf("%s %s: no such directory", flag, dir)}
	case err != nil:
		return usageError{fmt.Errorf("%s %s: %w", flag, dir, err)}
	case !fi.IsDir():
		return usageError{fmt.Errorf("%s %s: a file, not a directory", flag, dir)}
	}
	return nil
}
