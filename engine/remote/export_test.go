package remote

import "context"

// CheckKey is checkKey, for the benchmark of its cached path.
func (b *Backend) CheckKey(ctx context.Context) error { return b.checkKey(ctx) }
