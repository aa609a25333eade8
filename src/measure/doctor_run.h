/*
 * doctor_run.h: a run directory's files as moe doctor's rules read them (doctor.c), loaded by
 * doctor_read.c. Private to the two and to `moe compare` (cli/compare.c), which reads its runs
 * the same way.
 */
#ifndef MOE_MEASURE_DOCTOR_RUN_H
#define MOE_MEASURE_DOCTOR_RUN_H

#include "io/csv_table.h"
#include "measure/doctor.h"

#define MAX_E 4096
#define MAX_DOMAINS 64

/* domains.csv at its last evaluation: which experts each domain of the validation text went to */
typedef struct {
    int step; /* the evaluation's step; 0 when the run has no domains.csv */
    int n_domains;
    char names[MAX_DOMAINS][32];
    double *share; /* (n_moe, n_domains, E) share of a domain's assignments per expert */
} Domains;

/* the tables of one run directory */
typedef struct {
    CsvTable train, router, val_router, dist;
    /* train.spike_action=rollback: one row a rollback, and the undone steps' rows of train.csv
     * (each behind its rollback's number); empty when the run has none */
    CsvTable rollbacks, rolled_back;
    char *prov; /* provenance.txt, NULL when absent */
    Domains dom;
    int E, K, n_moe;
    /* train.csv's columns */
    int c_step, c_loss, c_aux, c_grad, c_tok, c_val, c_lspike, c_gspike;
    int c_skipped; /* 1: the step's update was not applied; -1 under train.spike_action=none */
} Run;

/* read dir's config.txt (into r->cfg), CSV files and provenance.txt; 0, or -1 with a message */
int load_run(DoctorReport *r, Run *run, const char *dir, char *err, int errlen);
void run_free(Run *run);

#endif
