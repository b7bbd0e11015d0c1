_petstore() {
    local i cur prev opts cmd
    COMPREPLY=()
    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        cur="$2"
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
    fi
    prev="$3"
    cmd=""
    opts=""

    for i in "${COMP_WORDS[@]:0:COMP_CWORD}"
    do
        case "${cmd},${i}" in
            ",$1")
                cmd="petstore"
                ;;
            petstore,backup)
                cmd="petstore__subcmd__backup"
                ;;
            petstore,check)
                cmd="petstore__subcmd__check"
                ;;
            petstore,copy)
                cmd="petstore__subcmd__copy"
                ;;
            petstore,help)
                cmd="petstore__subcmd__help"
                ;;
            petstore,keys)
                cmd="petstore__subcmd__keys"
                ;;
            petstore,new-key)
                cmd="petstore__subcmd__new__subcmd__key"
                ;;
            petstore,webhooks)
                cmd="petstore__subcmd__webhooks"
                ;;
            petstore__subcmd__help,backup)
                cmd="petstore__subcmd__help__subcmd__backup"
                ;;
            petstore__subcmd__help,check)
                cmd="petstore__subcmd__help__subcmd__check"
                ;;
            petstore__subcmd__help,copy)
                cmd="petstore__subcmd__help__subcmd__copy"
                ;;
            petstore__subcmd__help,help)
                cmd="petstore__subcmd__help__subcmd__help"
                ;;
            petstore__subcmd__help,keys)
                cmd="petstore__subcmd__help__subcmd__keys"
                ;;
            petstore__subcmd__help,new-key)
                cmd="petstore__subcmd__help__subcmd__new__subcmd__key"
                ;;
            petstore__subcmd__help,webhooks)
                cmd="petstore__subcmd__help__subcmd__webhooks"
                ;;
            petstore__subcmd__help__subcmd__keys,add)
                cmd="petstore__subcmd__help__subcmd__keys__subcmd__add"
                ;;
            petstore__subcmd__help__subcmd__keys,list)
                cmd="petstore__subcmd__help__subcmd__keys__subcmd__list"
                ;;
            petstore__subcmd__help__subcmd__keys,revoke)
                cmd="petstore__subcmd__help__subcmd__keys__subcmd__revoke"
                ;;
            petstore__subcmd__help__subcmd__webhooks,add)
                cmd="petstore__subcmd__help__subcmd__webhooks__subcmd__add"
                ;;
            petstore__subcmd__help__subcmd__webhooks,enable)
                cmd="petstore__subcmd__help__subcmd__webhooks__subcmd__enable"
                ;;
            petstore__subcmd__help__subcmd__webhooks,list)
                cmd="petstore__subcmd__help__subcmd__webhooks__subcmd__list"
                ;;
            petstore__subcmd__help__subcmd__webhooks,remove)
                cmd="petstore__subcmd__help__subcmd__webhooks__subcmd__remove"
                ;;
            petstore__subcmd__help__subcmd__webhooks,rotate)
                cmd="petstore__subcmd__help__subcmd__webhooks__subcmd__rotate"
                ;;
            petstore__subcmd__keys,add)
                cmd="petstore__subcmd__keys__subcmd__add"
                ;;
            petstore__subcmd__keys,help)
                cmd="petstore__subcmd__keys__subcmd__help"
                ;;
            petstore__subcmd__keys,list)
                cmd="petstore__subcmd__keys__subcmd__list"
                ;;
            petstore__subcmd__keys,revoke)
                cmd="petstore__subcmd__keys__subcmd__revoke"
                ;;
            petstore__subcmd__keys__subcmd__help,add)
                cmd="petstore__subcmd__keys__subcmd__help__subcmd__add"
                ;;
            petstore__subcmd__keys__subcmd__help,help)
                cmd="petstore__subcmd__keys__subcmd__help__subcmd__help"
                ;;
            petstore__subcmd__keys__subcmd__help,list)
                cmd="petstore__subcmd__keys__subcmd__help__subcmd__list"
                ;;
            petstore__subcmd__keys__subcmd__help,revoke)
                cmd="petstore__subcmd__keys__subcmd__help__subcmd__revoke"
                ;;
            petstore__subcmd__webhooks,add)
                cmd="petstore__subcmd__webhooks__subcmd__add"
                ;;
            petstore__subcmd__webhooks,enable)
                cmd="petstore__subcmd__webhooks__subcmd__enable"
                ;;
            petstore__subcmd__webhooks,help)
                cmd="petstore__subcmd__webhooks__subcmd__help"
                ;;
            petstore__subcmd__webhooks,list)
                cmd="petstore__subcmd__webhooks__subcmd__list"
                ;;
            petstore__subcmd__webhooks,remove)
                cmd="petstore__subcmd__webhooks__subcmd__remove"
                ;;
            petstore__subcmd__webhooks,rotate)
                cmd="petstore__subcmd__webhooks__subcmd__rotate"
                ;;
            petstore__subcmd__webhooks__subcmd__help,add)
                cmd="petstore__subcmd__webhooks__subcmd__help__subcmd__add"
                ;;
            petstore__subcmd__webhooks__subcmd__help,enable)
                cmd="petstore__subcmd__webhooks__subcmd__help__subcmd__enable"
                ;;
            petstore__subcmd__webhooks__subcmd__help,help)
                cmd="petstore__subcmd__webhooks__subcmd__help__subcmd__help"
                ;;
            petstore__subcmd__webhooks__subcmd__help,list)
                cmd="petstore__subcmd__webhooks__subcmd__help__subcmd__list"
                ;;
            petstore__subcmd__webhooks__subcmd__help,remove)
                cmd="petstore__subcmd__webhooks__subcmd__help__subcmd__remove"
                ;;
            petstore__subcmd__webhooks__subcmd__help,rotate)
                cmd="petstore__subcmd__webhooks__subcmd__help__subcmd__rotate"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        petstore)
            opts="-h -V --listen --tls-cert --tls-key --api-keys --acme-domain --acme-directory --acme-email --acme-ca-root --acme-eab-kid --acme-eab-hmac-key-file --acme-state-dir --db --cache-size --max-write-batch --shared-reads --idempotency-ttl --events-keep --order-hold --db-password-file --db-ca --db-pool-size --db-statement-timeout --max-connections --max-subscribers --handshake-timeout --header-timeout --body-timeout --idle-timeout --shutdown-timeout --rate-limit --rate-burst --auth-failure-limit --auth-failure-burst --backup-dir --backup-keep --backup-every --webhooks --webhook-retry-schedule --webhooks-allow-private --webhooks-ca --console-path --no-console --session-idle --metrics-listen --log-format --log-level --help --version new-key keys webhooks copy check backup help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --listen)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tls-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tls-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-keys)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --acme-domain)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --acme-directory)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --acme-email)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --acme-ca-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --acme-eab-kid)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --acme-eab-hmac-key-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --acme-state-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --db)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cache-size)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-write-batch)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --idempotency-ttl)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --events-keep)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --order-hold)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --db-password-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --db-ca)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --db-pool-size)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --db-statement-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-connections)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-subscribers)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --handshake-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --header-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --body-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --idle-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --shutdown-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --rate-limit)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --rate-burst)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --auth-failure-limit)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --auth-failure-burst)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --backup-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --backup-keep)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --backup-every)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --webhooks)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --webhook-retry-schedule)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --webhooks-ca)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --console-path)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --session-idle)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --metrics-listen)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --log-level)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__backup)
            opts="-h --db --to --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --db)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --to)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__check)
            opts="-h --db --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --db)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__copy)
            opts="-h --from --to --db-password-file --db-ca --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --from)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --to)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --db-password-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --db-ca)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__help)
            opts="new-key keys webhooks copy check backup help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__help__subcmd__backup)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__help__subcmd__check)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__help__subcmd__copy)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__help__subcmd__keys)
            opts="add list revoke"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__help__subcmd__keys__subcmd__add)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__help__subcmd__keys__subcmd__list)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__help__subcmd__keys__subcmd__revoke)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__help__subcmd__new__subcmd__key)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__help__subcmd__webhooks)
            opts="add list remove enable rotate"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__help__subcmd__webhooks__subcmd__add)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__help__subcmd__webhooks__subcmd__enable)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__help__subcmd__webhooks__subcmd__list)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__help__subcmd__webhooks__subcmd__remove)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__help__subcmd__webhooks__subcmd__rotate)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__keys)
            opts="-h --api-keys --help add list revoke help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --api-keys)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__keys__subcmd__add)
            opts="-h --read-only --expires --api-keys --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --expires)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-keys)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__keys__subcmd__help)
            opts="add list revoke help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__keys__subcmd__help__subcmd__add)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__keys__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__keys__subcmd__help__subcmd__list)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__keys__subcmd__help__subcmd__revoke)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__keys__subcmd__list)
            opts="-h --api-keys --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --api-keys)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__keys__subcmd__revoke)
            opts="-h --api-keys --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --api-keys)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__new__subcmd__key)
            opts="-h --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__webhooks)
            opts="-h --webhooks --help add list remove enable rotate help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --webhooks)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__webhooks__subcmd__add)
            opts="-h --types --label --from-start --webhooks --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --types)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --label)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --webhooks)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__webhooks__subcmd__enable)
            opts="-h --webhooks --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --webhooks)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__webhooks__subcmd__help)
            opts="add list remove enable rotate help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__webhooks__subcmd__help__subcmd__add)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__webhooks__subcmd__help__subcmd__enable)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__webhooks__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__webhooks__subcmd__help__subcmd__list)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__webhooks__subcmd__help__subcmd__remove)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__webhooks__subcmd__help__subcmd__rotate)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__webhooks__subcmd__list)
            opts="-h --db --db-password-file --db-ca --webhooks --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --db)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --db-password-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --db-ca)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --webhooks)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__webhooks__subcmd__remove)
            opts="-h --webhooks --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --webhooks)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        petstore__subcmd__webhooks__subcmd__rotate)
            opts="-h --finish --webhooks --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --webhooks)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
    esac
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _petstore -o nosort -o bashdefault -o default petstore
else
    complete -F _petstore -o bashdefault -o default petstore
fi
