//! Why a statement failed on one connection, as the retry loop of [`Db`](crate::Db) reads it.

/// Why a statement failed on one connection.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) error: postgres::Error,
    /// It failed while being prepared: the operation's statement itself was never sent.
    pub(crate) before_sending: bool,
    /// pgtenure itself cancelled the statement, and why (a lease's deadline watcher sent the
    /// connection's cancel request): a 57014 then is its own doing, not the server's timeout.
    pub(crate) cancelled: Option<&'static str>,
}

impl Failure {
    /// A failure before the operation's own statement was sent (preparing it, or asking the
    /// session a question first): nothing of the operation ran.
    pub(crate) fn before_sending(error: postgres::Error) -> Failure {
        Failure {
            error,
            before_sending: true,
            cancelled: None,
        }
    }
}

impl From<postgres::Error> for Failure {
    fn from(error: postgres::Error) -> Failure {
        Failure {
            error,
            before_sending: false,
            cancelled: None,
        }
    }
}
