// Package migrations holds ForgeCI's ordered SQL migrations (goose format),
// embedded so that every binary that migrates carries the same schema.
package migrations

import "embed"

// FS holds the *.sql migration files.
//
//go:embed *.sql
var FS embed.FS
