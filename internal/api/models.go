package api

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"slices"
	"strconv"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/spec"
)

// The model registry's routes. Its writes do not go through the control
// loop: they touch no experiment, trial or attempt, and each is one store
// transaction of its own (see docs/architecture.md).

// modelName reads and checks the path's model name, answering 400 itself.
func modelName(w http.ResponseWriter, r *http.Request) (string, bool) {
	name := r.PathValue("name")
	if err := virga.CheckModelName(name); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return "", false
	}
	return name, true
}

// versionRef reads the path's {version} of model name: a version number,
// "latest", or an alias; it answers 400 itself.
func versionRef(w http.ResponseWriter, r *http.Request, name string) (virga.ModelRef, bool) {
	v := r.PathValue("version")
	ref := virga.ModelRef{Name: name}
	switch n, err := strconv.ParseInt(v, 10, 64); {
	case v == "latest":
	case err == nil && n >= 1:
		ref.Version = n
	case virga.CheckAliasName(v) == nil:
		ref.Alias = v
	default:
		writeError(w, http.StatusBadRequest, fmt.Errorf("version: want a version number (1, 2, ...), latest or an alias, got %q", v))
		return ref, false
	}
	return ref, true
}

func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	ms, err := s.st.Models(r.Context())
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	as, err := s.st.ModelAliases(r.Context(), "")
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	out := make([]wire.ModelSummary, len(ms))
	for i, m := range ms {
		out[i] = wire.ModelSummary{Model: m, Aliases: map[string]int64{}}
		for _, a := range as {
			if a.Name == m.Name {
				out[i].Aliases[a.Alias] = a.Version
			}
		}
	}
	writeList(w, out, nil)
}

func (s *Server) getModel(w http.ResponseWriter, r *http.Request) {
	name, ok := modelName(w, r)
	if !ok {
		return
	}
	vs, err := s.st.ModelVersions(r.Context(), name)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	if len(vs) == 0 {
		writeError(w, http.StatusNotFound, fmt.Errorf("no model named %s: %w", name, virga.ErrNotFound))
		return
	}
	as, err := s.st.ModelAliases(r.Context(), name)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	if as == nil {
		as = []virga.ModelAlias{}
	}
	writeJSON(w, http.StatusOK, wire.ModelView{Name: name, Versions: vs, Aliases: as})
}

// resolve reads the path's model and version and finds the version,
// answering errors itself.
func (s *Server) resolve(w http.ResponseWriter, r *http.Request) (*virga.ModelVersion, bool) {
	name, ok := modelName(w, r)
	if !ok {
		return nil, false
	}
	ref, ok := versionRef(w, r, name)
	if !ok {
		return nil, false
	}
	v, err := s.models.Resolve(r.Context(), ref)
	if err != nil {
		writeError(w, statusOf(err), err)
		return nil, false
	}
	return v, true
}

func (s *Server) getModelVersion(w http.ResponseWriter, r *http.Request) {
	v, ok := s.resolve(w, r)
	if !ok {
		return
	}
	as, err := s.st.ModelAliases(r.Context(), v.Name)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	out := wire.ModelVersionView{ModelVersion: v, Aliases: []string{}}
	for _, a := range as {
		if a.Version == v.Version {
			out.Aliases = append(out.Aliases, a.Alias)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) registerModel(w http.ResponseWriter, r *http.Request) {
	name, ok := modelName(w, r)
	if !ok {
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/x-tar" {
		v, err := s.models.RegisterArchive(r.Context(), name, r.Body, r.URL.Query().Get("description"))
		if err != nil {
			writeError(w, statusOf(err), err)
			return
		}
		writeJSON(w, http.StatusCreated, v)
		return
	}
	var req wire.RegisterModelRequest
	if !decode(w, r, &req) {
		return
	}
	var t *virga.Trial
	switch {
	case req.ExperimentID != 0 && req.TrialID != 0:
		writeError(w, http.StatusBadRequest, errors.New("experiment_id, trial_id: give one of them, not both"))
		return
	case req.ExperimentID < 0 || req.TrialID < 0:
		writeError(w, http.StatusBadRequest, errors.New("experiment_id, trial_id: want a positive ID"))
		return
	case req.ExperimentID != 0 && !req.Best:
		writeError(w, http.StatusBadRequest, errors.New("best: want true with experiment_id (the model of the experiment's best trial)"))
		return
	case req.TrialID != 0 && req.Best:
		writeError(w, http.StatusBadRequest, errors.New("best: goes with experiment_id, not trial_id"))
		return
	case req.ExperimentID != 0:
		e, err := s.st.Experiment(r.Context(), req.ExperimentID)
		if err != nil {
			writeError(w, statusOf(err), err)
			return
		}
		trials, err := s.st.Trials(r.Context(), e.ID)
		if err != nil {
			writeError(w, statusOf(err), err)
			return
		}
		var o spec.Objective
		if sp, err := spec.Parse(e.SpecFile, e.Spec); err == nil {
			o = sp.Objective
		}
		if t = BestTrial(trials, o); t == nil {
			writeError(w, http.StatusConflict, fmt.Errorf("experiment %d has no trial that reported %q yet, so no best trial: %w", e.ID, o.Metric, virga.ErrConflict))
			return
		}
	case req.TrialID != 0:
		var err error
		if t, err = s.st.Trial(r.Context(), req.TrialID); err != nil {
			writeError(w, statusOf(err), err)
			return
		}
	default:
		writeError(w, http.StatusBadRequest, errors.New("experiment_id, trial_id: give one (with best for an experiment), or upload the model directory as application/x-tar"))
		return
	}
	v, err := s.models.RegisterTrial(r.Context(), name, t, req.Description)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusCreated, v)
}

func (s *Server) deleteModelVersion(w http.ResponseWriter, r *http.Request) {
	name, ok := modelName(w, r)
	if !ok {
		return
	}
	n, err := strconv.ParseInt(r.PathValue("version"), 10, 64)
	if err != nil || n < 1 {
		writeError(w, http.StatusBadRequest, fmt.Errorf("version: want the number of the version to delete, got %q", r.PathValue("version")))
		return
	}
	v, err := s.models.DeleteVersion(r.Context(), name, n)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) downloadModel(w http.ResponseWriter, r *http.Request) {
	v, ok := s.resolve(w, r)
	if !ok {
		return
	}
	// Written to a buffer file first so that a failure is an error status,
	// not a cut-off archive.
	f, err := os.CreateTemp("", "virga-model-*.tar")
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := s.models.WriteArchive(v, f); err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s-%d.tar"`, v.Name, v.Version))
	w.Header().Set("Virga-Model-Version", strconv.FormatInt(v.Version, 10))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, f)
}

func (s *Server) setModelAlias(w http.ResponseWriter, r *http.Request) {
	name, ok := modelName(w, r)
	if !ok {
		return
	}
	alias := r.PathValue("alias")
	if err := virga.CheckAliasName(alias); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	var req wire.AliasRequest
	if !decode(w, r, &req) {
		return
	}
	if req.Version < 1 {
		writeError(w, http.StatusBadRequest, fmt.Errorf("version: want the number of a version of %s (1, 2, ...), got %d", name, req.Version))
		return
	}
	a, err := s.models.SetAlias(r.Context(), name, alias, req.Version)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

func (s *Server) deleteModelAlias(w http.ResponseWriter, r *http.Request) {
	name, ok := modelName(w, r)
	if !ok {
		return
	}
	alias := r.PathValue("alias")
	if err := virga.CheckAliasName(alias); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	as, err := s.st.ModelAliases(r.Context(), name)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	i := slices.IndexFunc(as, func(a virga.ModelAlias) bool { return a.Alias == alias })
	if err := s.st.DeleteModelAlias(r.Context(), name, alias); err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	if i < 0 { // deleted between the read and the delete: it existed
		writeJSON(w, http.StatusOK, virga.ModelAlias{Name: name, Alias: alias})
		return
	}
	writeJSON(w, http.StatusOK, as[i])
}
