package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store/column"
	"github.com/virga-ml/virga/internal/store/sqlstore"
)

// RegisterModelVersion stores v as the next version of its model and sets v.Version.
func (s *Store) RegisterModelVersion(ctx context.Context, v *virga.ModelVersion) error {
	var enc column.Encoder
	created := enc.Time("created_at", v.CreatedAt)
	sig, hp, metrics := enc.Signature(v.Signature), enc.HParams(v.HParams), enc.Values(v.Metrics)
	if enc.Err != nil {
		return fmt.Errorf("registering model %s: %w", v.Name, enc.Err)
	}
	var version int64
	err := s.tx(ctx, func(tx pgx.Tx) error {
		// The row lock ON CONFLICT takes serialises registrations of one name.
		if err := tx.QueryRow(ctx, `INSERT INTO models (name, last_version, created_at) VALUES ($1, 1, $2)
			ON CONFLICT (name) DO UPDATE SET last_version = models.last_version + 1 RETURNING last_version`,
			v.Name, created).Scan(&version); err != nil {
			return wrap(err, "numbering the version")
		}
		if _, err := tx.Exec(ctx, `INSERT INTO model_versions (`+sqlstore.ModelVersionCols+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`,
			v.Name, version, v.FilesID, v.Size, v.Files, v.Format, sig, v.ExperimentID, v.TrialID, v.Step,
			v.CheckpointID, hp, metrics, v.Description, created); err != nil {
			return wrap(err, "inserting version %d", version)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("registering model %s: %w", v.Name, err)
	}
	v.Version = version
	return nil
}

// SetModelAlias creates or moves an alias.
func (s *Store) SetModelAlias(ctx context.Context, a virga.ModelAlias) error {
	var enc column.Encoder
	updated := enc.Time("updated_at", a.UpdatedAt)
	if enc.Err != nil {
		return fmt.Errorf("setting alias %s@%s: %w", a.Name, a.Alias, enc.Err)
	}
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM model_versions WHERE name = $1 AND version = $2`, a.Name, a.Version).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("model %s has no version %d: %w", a.Name, a.Version, virga.ErrNotFound)
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO model_aliases (name, alias, version, updated_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (name, alias) DO UPDATE SET version = excluded.version, updated_at = excluded.updated_at`,
			a.Name, a.Alias, a.Version, updated)
		if err != nil {
			return wrap(err, "writing the alias")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("setting alias %s@%s: %w", a.Name, a.Alias, err)
	}
	return nil
}

// DeleteModelAlias removes an alias.
func (s *Store) DeleteModelAlias(ctx context.Context, name, alias string) error {
	return s.conn(ctx, func(c *pgx.Conn) error {
		ct, err := c.Exec(ctx, `DELETE FROM model_aliases WHERE name = $1 AND alias = $2`, name, alias)
		if err != nil {
			return wrap(err, "deleting alias %s@%s", name, alias)
		}
		if ct.RowsAffected() == 0 {
			return fmt.Errorf("deleting alias %s@%s: no such alias: %w", name, alias, virga.ErrNotFound)
		}
		return nil
	})
}

// DeleteModelVersion removes a version that no alias points at.
func (s *Store) DeleteModelVersion(ctx context.Context, name string, version int64) (filesID string, shared bool, err error) {
	err = s.tx(ctx, func(tx pgx.Tx) error {
		// The row lock keeps an alias from being pointed at the version
		// (the foreign key's check waits for it) until the delete commits.
		err := tx.QueryRow(ctx, `SELECT files_id FROM model_versions WHERE name = $1 AND version = $2 FOR UPDATE`, name, version).Scan(&filesID)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("no such version: %w", virga.ErrNotFound)
		}
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT alias FROM model_aliases WHERE name = $1 AND version = $2 ORDER BY alias`, name, version)
		if err != nil {
			return err
		}
		var aliases []string
		for rows.Next() {
			var a string
			if err := rows.Scan(&a); err != nil {
				rows.Close()
				return err
			}
			aliases = append(aliases, name+"@"+a)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(aliases) > 0 {
			return aliasesConflict(aliases)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM model_versions WHERE name = $1 AND version = $2`, name, version); err != nil {
			return wrap(err, "deleting")
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM model_versions WHERE files_id = $1`, filesID).Scan(&n); err != nil {
			return err
		}
		shared = n > 0
		return nil
	})
	if err != nil {
		return "", false, fmt.Errorf("deleting model %s version %d: %w", name, version, err)
	}
	return filesID, shared, nil
}

// aliasesConflict is the error of deleting a version that aliases point at.
func aliasesConflict(aliases []string) error {
	return fmt.Errorf("%s still point%s at it (move or delete %s first): %w", strings.Join(aliases, ", "),
		map[bool]string{true: "s", false: ""}[len(aliases) == 1], map[bool]string{true: "it", false: "them"}[len(aliases) == 1], virga.ErrConflict)
}
