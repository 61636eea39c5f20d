package recorder

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/goccl/goccl/collectives"
)

// Every type has a name in the records, and the name gives back its size.
func TestEveryTypeNamed(t *testing.T) {
	for _, dt := range collectives.AllDataTypes() {
		n := typeName(dt)
		assert.NotEmpty(t, n, "%s", dt)
		assert.Equal(t, dt.Size(), typeSize(n), "%s", dt)
	}
}
