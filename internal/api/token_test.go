package api

import (
	"context"
	"crypto/sha256"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/sqlite"
)

// TestCheckToken: the exported token check other servers of the data
// directory use accepts the admin token and nothing else.
func TestCheckToken(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "virga.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sum := sha256.Sum256([]byte("admin-secret"))
	if err := st.PutToken(ctx, &store.Token{Name: "admin", Hash: sum[:], CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	s := New(Config{Store: st})
	for range 2 { // the second time from the cache
		if err := s.CheckToken(ctx, "admin-secret"); err != nil {
			t.Errorf("CheckToken(admin token) = %v, want nil", err)
		}
	}
	for _, tok := range []string{"", "admin-secre", "vt-trial-token"} {
		if err := s.CheckToken(ctx, tok); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("CheckToken(%q) = %v, want ErrInvalidToken", tok, err)
		}
	}
}
