//! [`OnDrop`]: local bookkeeping that follows a store call whether it finishes or is dropped.

/// Runs its closure when dropped: when the call that holds it ends, finished or cancelled.
/// For local state that must follow a store call either way (a cached denial dropped after a
/// reset that may have reached the store before its caller hung up).
pub(crate) struct OnDrop<F: FnMut()>(pub(crate) F);

impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}
