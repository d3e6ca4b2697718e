-- Price mode (1.3): the values a check could not read and skipped (`price selector '.p': no
-- price in match 2 'Call for price'`), named on the row beside the prices it did read. Only
-- added: 1.2 workers, which do not write it, run beside 1.3 ones during an upgrade.
ALTER TABLE source_checks ADD COLUMN skipped_values text[];
