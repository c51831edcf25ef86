package wire

import (
	"context"
	"testing"
	"time"
)

func TestSmoke(t *testing.T) {
	p := startProxy(t, nil, nil)
	c := connect(t, p.superDSN(""))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	if err := c.QueryRow(ctx, "SELECT $1::int + 1", 41).Scan(&n); err != nil || n != 42 {
		t.Fatalf("got %d, %v", n, err)
	}
}
