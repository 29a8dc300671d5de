package pgstore

import (
	"context"
	"net/url"

	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/deadletter"
)

// Importing the package registers postgres:// and postgresql:// as dead-letter store URLs with
// brokerurl's default Mux: the URL is pgx's connection string, and StoreOptions.Table and
// StoreOptions.Schema name the table (defaults DefaultTable and DefaultSchema).
func init() { brokerurl.RegisterStore(urlOpener{}) }

// urlOpener opens the table store from a postgres:// URL.
type urlOpener struct{}

// Schemes returns "postgres" and "postgresql".
func (urlOpener) Schemes() []string { return []string{"postgres", "postgresql"} }

// OpenStore opens the table store u names (Open: it connects and checks the server answers):
// u is pgx's connection string, and opts.Schema and opts.Table name the table (DefaultSchema
// and DefaultTable when empty). The other StoreOptions, which select a broker's destination,
// do not apply.
func (urlOpener) OpenStore(ctx context.Context, u *url.URL, opts brokerurl.StoreOptions) (deadletter.Store, error) {
	return Open(ctx, u.String(), Config{Schema: opts.Schema, Table: opts.Table})
}
