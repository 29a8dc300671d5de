package deadletter_test

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/millrace/millrace/deadletter"
)

// ErrorTypes names the Go types of an error's cause chain, as a dead-letter record carries
// them in millrace-dlq-error-types.
func ExampleErrorTypes() {
	err := fmt.Errorf("save order 42: %w", errors.Join(
		&fs.PathError{Op: "open", Path: "/var/orders", Err: fs.ErrPermission},
		errors.New("retry budget spent"),
	))
	types := deadletter.ErrorTypes(err)
	fmt.Println(types)
	rec := deadletter.Record{Reason: deadletter.Exhausted, Attempts: 3, ErrorTypes: types}
	fmt.Println(rec.Fields()[deadletter.KeyErrorTypes])
	// Output:
	// [*fmt.wrapError *errors.joinError *fs.PathError *errors.errorString]
	// ["*fmt.wrapError","*errors.joinError","*fs.PathError","*errors.errorString"]
}
