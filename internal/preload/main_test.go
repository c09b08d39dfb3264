//go:build linux && amd64

package preload

import (
	"testing"

	"github.com/heapscope/heapscope/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }
