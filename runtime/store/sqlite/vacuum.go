package sqlite

import (
	"context"
	"fmt"

	"github.com/trellisflow/trellis/runtime/store"
)

// ReturnSpace implements store.SpaceReturner with an incremental vacuum,
// which moves free pages to the end of the file and truncates it. A
// database made in incremental mode (every one this version makes) can;
// one made before keeps its free pages for reuse, returning none, until
// it is converted once with Vacuum.
func (s *Store) ReturnSpace(ctx context.Context, pages int) (returned, left int, err error) {
	var mode, before int
	if err := s.db.QueryRowContext(ctx, `PRAGMA auto_vacuum`).Scan(&mode); err != nil {
		return 0, 0, fmt.Errorf("sqlite: auto_vacuum: %w", err)
	}
	if err := s.db.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&before); err != nil {
		return 0, 0, fmt.Errorf("sqlite: freelist_count: %w", err)
	}
	if mode != incremental || before == 0 {
		return 0, before, nil
	}
	err = s.write(ctx, func() error {
		_, err := s.db.ExecContext(ctx, fmt.Sprintf(`PRAGMA incremental_vacuum(%d)`, pages))
		return err
	})
	if err != nil {
		return 0, before, fmt.Errorf("sqlite: incremental vacuum: %w", err)
	}
	if err := s.db.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&left); err != nil {
		return 0, 0, fmt.Errorf("sqlite: freelist_count: %w", err)
	}
	return max(before-left, 0), left, nil
}

// incremental is PRAGMA auto_vacuum's value for incremental mode.
const incremental = 2

// Vacuum rebuilds the whole database file, without its free pages and in
// incremental mode, so that ReturnSpace returns free pages from then on
// (a file made before this version was not). It holds the file for as long as it takes to
// copy the database (with room for a second copy, for a moment), so it
// is for a quiet time: `trellis prune --vacuum`.
func (s *Store) Vacuum(ctx context.Context) error {
	return s.write(ctx, func() error {
		conn, err := s.db.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		for _, q := range []string{`PRAGMA auto_vacuum = INCREMENTAL`, `VACUUM`} {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("sqlite: %s: %w", q, err)
			}
		}
		return nil
	})
}

var _ store.SpaceReturner = (*Store)(nil)
