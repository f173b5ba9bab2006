//! `steptrace merge`: per-rank Parquet folders into one set of tables.

#[cfg(feature = "parquet")]
use crate::console::print_result;

use crate::cli;

pub(crate) fn run(args: cli::MergeArgs) -> anyhow::Result<u8> {
    #[cfg(feature = "parquet")]
    {
        let o = steptrace::merge(&args.dirs, &args.out, args.top)?;
        print_result(&o.console, &o.out_dir)?;
        Ok(0)
    }
    #[cfg(not(feature = "parquet"))]
    {
        let _ = args;
        anyhow::bail!("merge needs the `parquet` feature (built without it)")
    }
}
