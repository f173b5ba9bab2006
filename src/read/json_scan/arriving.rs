//! Text that may still be arriving: what a walk may read of it now.

/// Text that may still be arriving (a gzip stream inflating on another thread): its whole
/// length is known, its bytes come in order.
pub(crate) trait Arriving: Sync {
    /// The whole text's length.
    fn total(&self) -> usize;
    /// The text so far, once at least `want` bytes of it have arrived (fewer only where it
    /// stopped arriving early: its source failed).
    fn wait_for(&self, want: usize) -> &[u8];
}

impl Arriving for [u8] {
    fn total(&self) -> usize {
        self.len()
    }
    fn wait_for(&self, _want: usize) -> &[u8] {
        self
    }
}

/// Text whose first bytes are had as far as they are asked for (text arriving, or inflated
/// member by member), for finding what comes before a large array.
pub(crate) trait Prefix {
    /// The whole text's length.
    fn total(&self) -> usize;
    /// The text from 0 through at least `want` bytes (fewer where there are no more to have).
    fn prefix(&mut self, want: usize) -> &[u8];
}

/// [`Arriving`] text as a [`Prefix`].
pub(crate) struct Arrived<'a, T: ?Sized>(pub &'a T);

impl<T: Arriving + ?Sized> Prefix for Arrived<'_, T> {
    fn total(&self) -> usize {
        self.0.total()
    }
    fn prefix(&mut self, want: usize) -> &[u8] {
        self.0.wait_for(want)
    }
}

/// Text that arrives only as far as it is asked for: the most a reader can be held back, each
/// piece seeing the text end just past its stretch and margin (tests and the fuzz target
/// `arriving_walk` hold [`walk_array_arriving`] to [`walk_array_parallel`] with it).
pub(crate) struct OnDemand<'a> {
    text: &'a [u8],
    shown: std::sync::Mutex<usize>,
}

impl<'a> OnDemand<'a> {
    /// `text`, none of it shown yet.
    pub(crate) fn new(text: &'a [u8]) -> Self {
        OnDemand {
            text,
            shown: std::sync::Mutex::new(0),
        }
    }
}

impl Arriving for OnDemand<'_> {
    fn total(&self) -> usize {
        self.text.len()
    }
    fn wait_for(&self, want: usize) -> &[u8] {
        let mut n = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        *n = (*n).max(want.min(self.text.len()));
        &self.text[..*n]
    }
}
