package redisstream

import (
	"time"

	"github.com/millrace/millrace"
)

var _ millrace.BudgetBounded = (*Adapter)(nil)

// MaxBudget is Config.ProcessingBudget: the router refuses a longer router.Config.Budget and
// uses this one when none is set, so the reclaimer (MinIdle >= ProcessingBudget) never takes an
// entry from a consumer that is still within its budget.
func (a *Adapter) MaxBudget() time.Duration { return a.cfg.budget() }
