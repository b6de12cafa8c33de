package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
)

func sse(w http.ResponseWriter, f http.Flusher, event string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
		return err
	}
	f.Flush()
	return nil
}

// watch streams an experiment's progress as server-sent events.
func (s *Server) watch(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	f, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, errors.New("streaming is not supported by this connection"))
		return
	}
	// Subscribe before reading, so no change falls between the two.
	ch, cancel := s.ctl.Subscribe(id)
	defer cancel()
	e, err := s.st.Experiment(r.Context(), id)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	trials, err := s.st.Trials(r.Context(), id)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	v := s.view(e, trials, false)
	if err := s.addSpend(r.Context(), &v); err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if trials == nil {
		trials = []*virga.Trial{}
	}
	if err := sse(w, f, "snapshot", wire.WatchSnapshot{Experiment: v, Trials: trials}); err != nil {
		return
	}
	if e.State.Terminal() {
		_ = sse(w, f, "end", e)
		return
	}
	ping := time.NewTicker(2 * time.Second)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-ping.C:
			// Updates may be dropped for a slow reader: never miss the end.
			if e, err := s.st.Experiment(r.Context(), id); err == nil && e.State.Terminal() {
				_ = sse(w, f, "end", e)
				return
			}
			if _, err := io.WriteString(w, ": ping\n\n"); err != nil {
				return
			}
			f.Flush()
		case u, ok := <-ch:
			if !ok {
				return
			}
			if err := sse(w, f, "update", u); err != nil {
				return
			}
			if u.Experiment != nil && u.Experiment.State.Terminal() {
				_ = sse(w, f, "end", u.Experiment)
				return
			}
		case <-s.ctl.Done():
			return
		}
	}
}

// logs writes a trial's output, attempt after attempt; with follow=true it
// keeps streaming until the trial has ended and its last output is sent.
func (s *Server) logs(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	if _, err := s.st.Trial(r.Context(), id); err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	follow := r.URL.Query().Get("follow") == "true" || r.URL.Query().Get("follow") == "1"
	// attempt=N: only attempt number N's output, without a header.
	only, ok := queryInt(w, r, "attempt", 0)
	if !ok {
		return
	}
	if only < 0 {
		writeError(w, http.StatusBadRequest, fmt.Errorf("attempt: want a positive attempt number, got %d", only))
		return
	}
	if only > 0 {
		as, err := s.st.Attempts(r.Context(), id)
		if err != nil {
			writeError(w, statusOf(err), err)
			return
		}
		if !slices.ContainsFunc(as, func(a *virga.Attempt) bool { return int64(a.Number) == only }) {
			writeError(w, http.StatusNotFound, fmt.Errorf("trial %d has no attempt %d (it has %d): %w", id, only, len(as), virga.ErrNotFound))
			return
		}
	}
	f, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	sent := map[int64]int64{} // attempt ID -> bytes sent
	headed := map[int64]bool{}
	for {
		t, err := s.st.Trial(r.Context(), id)
		if err != nil {
			return
		}
		as, err := s.st.Attempts(r.Context(), id)
		if err != nil {
			return
		}
		if only > 0 {
			as = slices.DeleteFunc(as, func(a *virga.Attempt) bool { return int64(a.Number) != only })
		}
		for _, a := range as {
			if a.Dir == "" {
				continue
			}
			if !headed[a.ID] && len(as) > 1 {
				from := "the start"
				if a.Restored != "" {
					from = "checkpoint " + a.Restored[:min(12, len(a.Restored))]
				}
				fmt.Fprintf(w, "=== attempt %d (from %s) ===\n", a.Number, from)
				headed[a.ID] = true
			}
			n, err := copyFrom(w, filepath.Join(a.Dir, "output.log"), sent[a.ID])
			sent[a.ID] += n
			if err != nil {
				return
			}
		}
		if f != nil {
			f.Flush()
		}
		if !follow || t.State.Terminal() {
			if follow && t.State.Terminal() {
				// One last read: output written just before the end.
				for _, a := range as {
					if a.Dir != "" {
						n, _ := copyFrom(w, filepath.Join(a.Dir, "output.log"), sent[a.ID])
						sent[a.ID] += n
					}
				}
			}
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(s.cfg.PollInterval):
		}
	}
}

// copyFrom copies a file's bytes from offset to w; a missing file is empty.
func copyFrom(w io.Writer, path string, off int64) (int64, error) {
	fh, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	if _, err := fh.Seek(off, io.SeekStart); err != nil {
		return 0, err
	}
	return io.Copy(w, fh)
}
