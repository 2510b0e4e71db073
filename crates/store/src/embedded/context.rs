//! Turns redb's errors into the store's `Unavailable`, naming the operation.

use crate::Error;

pub(crate) trait Context<T> {
    fn ctx(self, operation: &str) -> Result<T, Error>;
}

impl<T, E> Context<T> for Result<T, E>
where
    E: std::error::Error + Send + Sync + 'static,
{
    fn ctx(self, operation: &str) -> Result<T, Error> {
        self.map_err(|e| Error::unavailable(format!("embedded store: {operation}"), e))
    }
}
