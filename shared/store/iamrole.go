package store

import (
	"context"
	"fmt"

	"github.com/forgeci/forgeci/shared/domain"
	"github.com/jackc/pgx/v5"
)

var roleNameRE = domain.LazyRegexp(`^[a-z_][a-z0-9_]{0,62}$`)

// EnsureIAMUser makes the database user the functions connect as with IAM
// tokens (the default shape, template.yaml): a login role granted the
// migrating user's privileges (the functions did all they do as that user
// before) and, on RDS, rds_iam, which makes it log in by token only. It is
// run by the migrate function, which alone holds the master password.
func EnsureIAMUser(ctx context.Context, url, user string) error {
	if !roleNameRE().MatchString(user) {
		return fmt.Errorf("database IAM user %q: lower-case letters, digits and _ only", user)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("database IAM user: %w", err)
	}
	defer conn.Close(ctx)
	role := pgx.Identifier{user}.Sanitize()
	var exists, rdsIAM bool
	var self string
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1),
                                          EXISTS (SELECT FROM pg_roles WHERE rolname = 'rds_iam'), current_user`,
		user).Scan(&exists, &rdsIAM, &self); err != nil {
		return fmt.Errorf("database IAM user: %w", err)
	}
	stmts := []string{}
	if !exists {
		stmts = append(stmts, "CREATE ROLE "+role+" LOGIN")
	}
	if rdsIAM {
		stmts = append(stmts, "GRANT rds_iam TO "+role)
	}
	stmts = append(stmts, "GRANT "+pgx.Identifier{self}.Sanitize()+" TO "+role)
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("database IAM user: %s: %w", q, err)
		}
	}
	return nil
}
