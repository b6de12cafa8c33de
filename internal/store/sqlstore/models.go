package sqlstore

import (
	"context"
	"fmt"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store/column"
)

func scanModelVersion(r Row) (*virga.ModelVersion, error) {
	var v virga.ModelVersion
	var sig, hp, metrics string
	var files int64
	var created *int64
	if err := r.Scan(&v.Name, &v.Version, &v.FilesID, &v.Size, &files, &v.Format, &sig, &v.ExperimentID,
		&v.TrialID, &v.Step, &v.CheckpointID, &hp, &metrics, &v.Description, &created); err != nil {
		return nil, err
	}
	v.Files, v.CreatedAt = int(files), column.DecTime(created)
	var err error
	if v.Signature, err = column.DecSignature(sig); err != nil {
		return nil, fmt.Errorf("model %s version %d: %w", v.Name, v.Version, err)
	}
	if v.HParams, err = column.DecHParams(hp); err != nil {
		return nil, fmt.Errorf("model %s version %d: %w", v.Name, v.Version, err)
	}
	if v.Metrics, err = column.DecValues(metrics); err != nil {
		return nil, fmt.Errorf("model %s version %d: %w", v.Name, v.Version, err)
	}
	return &v, nil
}

// Models lists the models that have at least one version, by name.
func (r *Reader) Models(ctx context.Context) ([]virga.Model, error) {
	return list(ctx, r, "models", func(row Row) (virga.Model, error) {
		var m virga.Model
		var versions int64
		var updated *int64
		err := row.Scan(&m.Name, &versions, &m.Latest, &updated)
		m.Versions, m.UpdatedAt = int(versions), column.DecTime(updated)
		return m, err
	}, `SELECT name, COUNT(*), MAX(version), MAX(created_at) FROM model_versions GROUP BY name ORDER BY name`)
}

// ModelVersions lists a model's versions, oldest first.
func (r *Reader) ModelVersions(ctx context.Context, name string) ([]*virga.ModelVersion, error) {
	return list(ctx, r, "model versions", scanModelVersion,
		`SELECT `+ModelVersionCols+` FROM model_versions WHERE name = `+r.d.Param(1)+` ORDER BY version`, name)
}

// ModelVersion returns one version of a model; 0 means its newest.
func (r *Reader) ModelVersion(ctx context.Context, name string, version int64) (*virga.ModelVersion, error) {
	if version == 0 {
		return one(ctx, r, fmt.Sprintf("model %s: no version", name), scanModelVersion,
			`SELECT `+ModelVersionCols+` FROM model_versions WHERE name = `+r.d.Param(1)+` ORDER BY version DESC LIMIT 1`, name)
	}
	return one(ctx, r, fmt.Sprintf("model %s version %d", name, version), scanModelVersion,
		`SELECT `+ModelVersionCols+` FROM model_versions WHERE name = `+r.d.Param(1)+` AND version = `+r.d.Param(2), name, version)
}

// ModelAliases lists a model's aliases, or every model's for name "".
func (r *Reader) ModelAliases(ctx context.Context, name string) ([]virga.ModelAlias, error) {
	q, args := `SELECT name, alias, version, updated_at FROM model_aliases`, []any{}
	if name != "" {
		q, args = q+` WHERE name = `+r.d.Param(1), append(args, name)
	}
	return list(ctx, r, "model aliases", func(row Row) (virga.ModelAlias, error) {
		var a virga.ModelAlias
		var updated *int64
		err := row.Scan(&a.Name, &a.Alias, &a.Version, &updated)
		a.UpdatedAt = column.DecTime(updated)
		return a, err
	}, q+` ORDER BY name, alias`, args...)
}
