//! What the differential tests share: a statement of `sql/` rendered for a scratch table, and the
//! scratch table itself, dropped (with its sequence) when the test ends.

use postgres::{Client, NoTls};

/// `sql/<module>/<file>` with its `{table}` named `table`, as the library renders it.
pub fn sql(module: &str, file: &str, table: &str) -> String {
    let path = format!("{}/../sql/{module}/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    pgtenure::testing::render_sql(&text, &[("table", table)]).expect("a plain table name")
}

/// A scratch table of this process, and the connection the cases run on.
pub struct Table {
    pub name: String,
    pub client: Client,
    /// The sequence created beside it, if any (`<table>_<suffix>`).
    sequence: Option<&'static str>,
}

impl Drop for Table {
    fn drop(&mut self) {
        let mut drop = format!("DROP TABLE IF EXISTS {}", self.name);
        if let Some(suffix) = self.sequence {
            drop += &format!("; DROP SEQUENCE IF EXISTS {}_{suffix}", self.name);
        }
        let _ = self.client.batch_execute(&drop);
    }
}

/// Creates `t_model_<prefix>_<pid>` with `sql/<module>/create_table.sql`, and its sequence
/// (`create_sequence.sql`, named `<table>_<sequence>`) when `sequence` is given.
pub fn table(module: &str, prefix: &str, sequence: Option<&'static str>) -> Table {
    let url = pgtenure::testing::database_url().expect("a database");
    let client = Client::connect(&url, NoTls).expect("connect");
    let name = format!("t_model_{prefix}_{}", std::process::id());
    let mut table = Table {
        name,
        client,
        sequence,
    };
    let create = sql(module, "create_table.sql", &table.name);
    table.client.batch_execute(&create).expect("create table");
    if sequence.is_some() {
        let create = sql(module, "create_sequence.sql", &table.name);
        table
            .client
            .batch_execute(&create)
            .expect("create sequence");
    }
    table
}
