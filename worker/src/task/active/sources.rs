//! The topics an active task reads. Every job reads partition `task` of its input topic, the
//! left side; a join also reads partition `task` of its right topic. Each source's position
//! travels in the state under its own key, is committed as a group offset in the task's
//! transaction, and is resumed by the same rule (`input_position`); each source's identity is
//! checked the same way (`input_identity`).

use crate::processor::Side;
use crate::processor::keys;

/// Where each source resumes after a transaction; `None`: it consumed nothing of that source.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Positions {
    pub left: Option<i64>,
    pub right: Option<i64>,
}

impl Positions {
    /// The left source at `next`, the right one untouched.
    pub fn left(next: i64) -> Self {
        Self {
            left: Some(next),
            right: None,
        }
    }

    /// `side` resumes at `next`.
    pub fn set(&mut self, side: Side, next: i64) {
        match side {
            Side::Left => self.left = Some(next),
            Side::Right => self.right = Some(next),
        }
    }

    /// The sources the transaction moved, with their next offsets.
    pub fn moved(&self) -> impl Iterator<Item = (Side, i64)> {
        [(Side::Left, self.left), (Side::Right, self.right)]
            .into_iter()
            .filter_map(|(side, next)| Some((side, next?)))
    }
}

/// The state key holding `side`'s position.
pub fn position_key(side: Side) -> &'static [u8] {
    match side {
        Side::Left => keys::INPUT_POSITION,
        Side::Right => keys::RIGHT_INPUT_POSITION,
    }
}

/// The state key holding the identity of the topic `side` was read from.
pub fn identity_key(side: Side) -> &'static [u8] {
    match side {
        Side::Left => keys::INPUT,
        Side::Right => keys::RIGHT_INPUT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_name_only_the_sources_a_transaction_moved() {
        let mut positions = Positions::default();
        assert_eq!(positions.moved().count(), 0);
        positions.set(Side::Right, 7);
        assert_eq!(positions.moved().collect::<Vec<_>>(), [(Side::Right, 7)]);
        positions.set(Side::Left, 3);
        assert_eq!(
            positions.moved().collect::<Vec<_>>(),
            [(Side::Left, 3), (Side::Right, 7)]
        );
        assert_eq!(
            Positions::left(5).moved().collect::<Vec<_>>(),
            [(Side::Left, 5)]
        );
    }

    #[test]
    fn each_source_has_its_own_keys() {
        assert_ne!(position_key(Side::Left), position_key(Side::Right));
        assert_ne!(identity_key(Side::Left), identity_key(Side::Right));
    }
}
