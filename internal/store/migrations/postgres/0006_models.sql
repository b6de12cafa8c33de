-- The model registry. models holds one row per model name ever registered,
-- with the last version number given out (versions are never reused, even
-- after a delete). model_versions are immutable rows: files_id names the
-- model directory's copy in the checkpoint storage, shared by versions of
-- equal content; signature is JSON (virga.ModelSignature), hparams and
-- metrics JSON as in trials and metrics; the lineage columns are 0 and ''
-- for a version uploaded from a directory. model_aliases point at a version;
-- the foreign key keeps a version with an alias from being deleted.
CREATE TABLE models (
    name         TEXT    PRIMARY KEY,
    last_version BIGINT  NOT NULL,
    created_at   BIGINT
);

CREATE TABLE model_versions (
    name          TEXT    NOT NULL REFERENCES models (name),
    version       BIGINT  NOT NULL,
    files_id      TEXT    NOT NULL,
    size          BIGINT  NOT NULL,
    files         BIGINT  NOT NULL,
    format        TEXT    NOT NULL,
    signature     TEXT    NOT NULL,
    experiment_id BIGINT  NOT NULL,
    trial_id      BIGINT  NOT NULL,
    step          BIGINT  NOT NULL,
    checkpoint_id TEXT    NOT NULL,
    hparams       TEXT    NOT NULL,
    metrics       TEXT    NOT NULL,
    description   TEXT    NOT NULL,
    created_at    BIGINT ,
    PRIMARY KEY (name, version)
);
CREATE INDEX model_versions_files ON model_versions (files_id);

CREATE TABLE model_aliases (
    name       TEXT    NOT NULL,
    alias      TEXT    NOT NULL,
    version    BIGINT  NOT NULL,
    updated_at BIGINT ,
    PRIMARY KEY (name, alias),
    FOREIGN KEY (name, version) REFERENCES model_versions (name, version)
);
CREATE INDEX model_aliases_version ON model_aliases (name, version);
