package sqs

import (
	"time"

	"github.com/millrace/millrace"
)

var _ millrace.BudgetBounded = (*Adapter)(nil)

// MaxBudget is Config.ProcessingBudget (itself below VisibilityTimeout): the router refuses a
// longer router.Config.Budget and uses this one when none is set, so a message never becomes
// visible to a second consumer while its handler still runs.
func (a *Adapter) MaxBudget() time.Duration { return a.cfg.ProcessingBudget }
