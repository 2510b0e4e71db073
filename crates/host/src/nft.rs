//! nftables transactions: a ruleset text applied whole by `nft -f -`, so
//! that the kernel takes all of it or none of it.

use crate::command::{Command, Error, Host};

/// Applies `ruleset` as one transaction.
pub async fn apply(host: &dyn Host, ruleset: &str) -> Result<(), Error> {
    host.run(&Command::new("nft", ["-f", "-"]).stdin(ruleset))
        .await
        .map(drop)
}

/// Deletes `family`'s `table` (a node being taken down, a test cleaning
/// up); a table that is not there is no error.
pub async fn delete_table(host: &dyn Host, family: &str, table: &str) -> Result<(), Error> {
    // `add` then `delete` in one transaction: deleting a missing table
    // alone fails.
    apply(
        host,
        &format!("add table {family} {table}\ndelete table {family} {table}\n"),
    )
    .await
}

/// Creates `family`'s `table` if it is not there: whether it was created
/// (`false`: it existed). Nothing else of the table is read.
pub async fn create_table(host: &dyn Host, family: &str, table: &str) -> Result<bool, Error> {
    let created = host
        .run(&Command::new("nft", ["create", "table", family, table]))
        .await;
    match created {
        Ok(_) => Ok(true),
        Err(Error::Command { message, .. }) if message.contains("File exists") => Ok(false),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeHost;

    #[tokio::test]
    async fn a_ruleset_is_one_nft_transaction_on_stdin() {
        let host = FakeHost::new();
        apply(&host, "add table ip t\n").await.expect("applied");
        delete_table(&host, "ip", "t").await.expect("deleted");
        assert_eq!(
            host.stdins("nft"),
            ["add table ip t\n", "add table ip t\ndelete table ip t\n"]
        );
        assert_eq!(host.commands()[0].args, ["-f", "-"]);
    }

    #[tokio::test]
    async fn create_table_tells_a_new_table_from_an_existing_one() {
        let host = FakeHost::new();
        assert!(create_table(&host, "ip", "t").await.expect("created"));
        host.answer(|_| Err("Error: Could not process rule: File exists".into()));
        assert!(!create_table(&host, "ip", "t").await.expect("existed"));
        host.answer(|_| Err("Error: Operation not permitted".into()));
        assert!(create_table(&host, "ip", "t").await.is_err());
    }
}
