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

// ValidateBudget checks a router processing budget (router.Config.Budget) against
// Config.ProcessingBudget with Config.ValidateBudget. A budget of 0 stands for what the router
// then uses, MaxBudget (router.Config.Budget 0 means the adapter's default), and so passes.
func (a *Adapter) ValidateBudget(routerBudget time.Duration) error {
	if routerBudget == 0 {
		routerBudget = a.MaxBudget()
	}
	return a.cfg.ValidateBudget(routerBudget)
}
