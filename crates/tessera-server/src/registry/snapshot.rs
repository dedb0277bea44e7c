//! The plans and signing keys: few, so held as one snapshot, [`Registry`], swapped whole
//! when one of them changes. Clients name their plan by [`PlanSlot`].

use std::collections::HashMap;
use std::sync::Arc;

use tessera_store::Plan;

use crate::keys::KeyRing;

/// Where a client's plan sits in the [`Registry`]: a plan name's slot stays the same while
/// the process runs, whatever becomes of the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanSlot(pub(super) u32);

/// The plans and signing keys: a snapshot, replaced whole when one of them changes.
#[derive(Debug, Default, Clone)]
pub struct Registry {
    /// Plans by slot; `None` for a name whose plan is gone (or not read yet).
    pub(super) plans: Vec<Option<Arc<Plan>>>,
    /// Each plan name's slot. Names are only added: a slot is never given to another name.
    pub(super) slots: HashMap<String, PlanSlot>,
    /// The signing keys.
    pub keys: KeyRing,
}

impl Registry {
    /// The plan in `slot`, if it exists.
    pub fn plan(&self, slot: PlanSlot) -> Option<&Arc<Plan>> {
        self.plans.get(slot.0 as usize)?.as_ref()
    }

    /// Every plan.
    pub fn plans(&self) -> impl Iterator<Item = &Arc<Plan>> {
        self.plans.iter().flatten()
    }

    /// The slot of plan `name`, given one if it has none yet.
    pub(super) fn slot(&mut self, name: &str) -> PlanSlot {
        if let Some(slot) = self.slots.get(name) {
            return *slot;
        }
        let slot = PlanSlot(u32::try_from(self.plans.len()).expect("fewer than 2^32 plans"));
        self.plans.push(None);
        self.slots.insert(name.to_owned(), slot);
        slot
    }

    pub(super) fn set_plan(&mut self, name: &str, plan: Option<Plan>) {
        let slot = self.slot(name);
        self.plans[slot.0 as usize] = plan.map(Arc::new);
    }

    /// Whether some plan grants the scope `name`.
    pub fn knows_scope(&self, name: &str) -> bool {
        self.plans()
            .any(|p| p.scopes.iter().any(|s| s.as_str() == name))
    }

    /// Every scope some plan grants.
    pub fn scopes_supported(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .plans()
            .flat_map(|p| p.scopes.iter().map(|s| s.to_string()))
            .collect();
        all.sort();
        all.dedup();
        all
    }
}
