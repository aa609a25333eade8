/*
 * doctor.c: `moe doctor RUN_DIR [--json] [--threshold NAME=VALUE]... | --thresholds`, a run
 * directory's diagnosis (measure/doctor.h). Its exit status is the verdict: 0 healthy, 1 a
 * warning, 3 a failure; 2 when the command line or the run directory cannot be read.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "measure/doctor.h"

int cmd_doctor(int argc, char **argv) {
    const char *dir = NULL;
    int json = 0, list = 0;
    double th[TH_COUNT];
    health_defaults(th);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(cli_help("doctor"), stdout);
            return 0;
        }
        if (strncmp(a, "--", 2) != 0) {
            if (dir) usage_error("doctor", "one run directory, not also '%s'", a);
            dir = a;
        } else if (!cli_option_allowed("doctor", a)) {
            usage_error("doctor", "unknown option '%s'", a);
        } else if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--thresholds") == 0) {
            list = 1;
        } else { /* --threshold NAME=VALUE */
            if (i + 1 >= argc) usage_error("doctor", "%s needs NAME=VALUE", a);
            char err[512];
            if (health_set(th, argv[++i], err, sizeof err) != 0)
                usage_error("doctor", "--threshold: %s", err);
        }
    }
    if (list) {
        if (dir)
            usage_error("doctor", "--thresholds lists the thresholds; it reads no run ('%s')", dir);
        health_print(stdout);
        return 0;
    }
    if (!dir) usage_error("doctor", "%s", "name the run directory to diagnose");
    static DoctorReport r; /* 70 KB of evidence: not on the stack */
    char err[1024];
    if (doctor_run(&r, dir, th, err, sizeof err) != 0) moe_input_error("moe doctor: %s", err);
    if (json)
        doctor_print_json(&r, stdout);
    else
        doctor_print(&r, stdout);
    return doctor_exit_status(&r);
}
