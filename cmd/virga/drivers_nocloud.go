//go:build !cloud

package main

import (
	"context"
	"fmt"
	"net/url"

	"github.com/virga-ml/virga/internal/checkpoint"
)

// cloudTag is empty: this build has no cloud object stores.
const cloudTag = ""

// cloudSchemes refuses s3://, gs:// and azblob:// checkpoint storage, saying
// how to build a virga that has them.
func cloudSchemes() checkpoint.Schemes {
	refuse := func(_ context.Context, _ *url.URL, location string) (checkpoint.Storage, error) {
		return nil, fmt.Errorf("opening checkpoint storage %q: %w", location,
			notBuiltIn("the cloud object stores (s3://, gs://, azblob://)", "cloud"))
	}
	return checkpoint.Schemes{"s3": refuse, "gs": refuse, "azblob": refuse}
}
