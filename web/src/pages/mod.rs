//! The HTML pages (askama templates in `templates/`): the weekly review and its sections, the
//! weeks with their trends, a job, the duplicates, retention, what-if and the SQL page, with their
//! charts and CSV downloads. `whatif` and `section_page` also answer their JSON twins. It may
//! import `api/` (the SQL page runs statements as `/v1/sql` does) and `server/`.

pub(crate) mod charts;
pub(crate) mod daily;
pub(crate) mod downloads;
pub(crate) mod duplicates;
pub(crate) mod html;
pub(crate) mod job;
pub mod retention;
pub(crate) mod review;
pub(crate) mod section_page;
pub(crate) mod sections;
pub(crate) mod sql_page;
pub(crate) mod timeline;
pub(crate) mod trends;
pub(crate) mod weeks;
pub mod whatif;
