package postgres

import (
	"context"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"
)

// CreateDatabase creates a new, empty database called name on the server
// of addr (a postgres:// URL) and returns addr naming it instead, for
// tools that need a database of their own per run (`trellis dev
// loadtest`).
func CreateDatabase(ctx context.Context, addr, name string) (string, error) {
	u, err := url.Parse(addr)
	if err != nil {
		return "", fmt.Errorf("postgres: create database %s: %w", name, err)
	}
	if err := onServer(ctx, addr, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("postgres: create database %s: %w", name, err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// DropDatabase drops the database called name on the server of addr (a
// postgres:// URL naming another database of it), closing the
// connections to it first.
func DropDatabase(ctx context.Context, addr, name string) error {
	if err := onServer(ctx, addr, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`); err != nil {
		return fmt.Errorf("postgres: drop database %s: %w", name, err)
	}
	return nil
}

// onServer runs one statement outside a transaction on a connection of
// its own to addr.
func onServer(ctx context.Context, addr, sql string) error {
	conn, err := pgx.Connect(ctx, addr)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}
